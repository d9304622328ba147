"""`tune` with the measurements replaced by synthetic runs: sweep, schedule, overlay, predictions."""

from __future__ import annotations

import contextlib
import json

import pytest
import yaml

from toolkit.bench.api import tune
from toolkit.bench.decide.predict import PlanResult, Prediction
from toolkit.bench.decide.tune import baseline_overrides, sweep_configs
from toolkit.bench.measure.loadgen import BenchResult, LevelResult
from toolkit.bench.orchestrate import side as side_mod
from toolkit.bench.orchestrate import tune as tune_run
from toolkit.bench.report import render, schedule_ratio_source
from toolkit.errors import UsageError
from toolkit.recipe import load_recipe

from .conftest import record

LEVELS = (1, 2, 4, 16)


def speedup_model(g: int, c: int) -> float:
    """Ground truth for the fake measurements: best γ falls as concurrency grows."""
    return (1 + 0.5 * g) / (1 + 0.05 * g * g * c) if g else 1.0


SCHEDULE = {1: 3, 2: 2, 4: 1, 16: 0}  # the per-level winners of speedup_model over γ = 1..4


def run_at(g: int | dict[int, int], luck: dict[int, float] | None = None, levels=LEVELS) -> BenchResult:
    """Synthetic run at draft length g, or at g[c] per level (a draft_len_schedule); `luck`:
    concurrency -> how much faster than its model this run happened to be there."""
    res = BenchResult(endpoint="fake", workload={"name": "code", "prompts": 36}, settings={})
    for c in levels:
        gl = g[c] if isinstance(g, dict) else g
        gap = 1 / (100.0 * speedup_model(gl, c) * (luck or {}).get(c, 1.0))
        recs = [
            record(
                i,
                ttft=gap,
                gaps=[gap * (1 + 0.01 * (i % 3))] * 11,
                accepted=gl,
                drafted=2 * gl,
                concurrency=c,
            )
            for i in range(12)
        ]
        res.levels.append(LevelResult(c, None, recs, duration=1.0))
    return res


@pytest.fixture
def fake_measure(monkeypatch):
    calls = []

    def load_at(side, url, model, wl, opts, load, *, label):
        """The load generator's place in measure_side: every deployment and side is real."""
        calls.append((label, load.num_draft_tokens, url))
        if label == "draft_len_schedule":
            return run_at(SCHEDULE)
        g = 0 if "baseline" in label else int(label.split("=")[1].split()[0]) if label.startswith("γ=") else 0
        return run_at(g, levels=load.concurrency or LEVELS)

    monkeypatch.setattr(side_mod, "load_at", load_at)
    return calls


def fake_deploy(log):
    @contextlib.contextmanager
    def deploy(recipe_path, overrides=()):
        log.append(list(overrides))
        yield "127.0.0.1:9", "ensemble"

    return deploy


def test_sweep_configs_and_baseline_overrides():
    rec = load_recipe("tiny-draft-target")
    cfgs = sweep_configs(rec, None)
    assert [c["draft_len"] for c in cfgs] == list(range(1, 9))
    assert cfgs[2]["overrides"] == ["speculative.max_draft_len=3"]
    base = load_recipe("tiny-draft-target", baseline_overrides(rec))
    assert base.mode == "none" and base.models.draft is None
    la = load_recipe("tiny-lookahead")
    for c in sweep_configs(la, None):  # every lookahead candidate is a valid recipe
        r = load_recipe("tiny-lookahead", c["overrides"])
        assert r.speculative.draft_len == c["draft_len"]
    with pytest.raises(UsageError, match="no single draft length"):
        sweep_configs(la, [2])
    with pytest.raises(UsageError, match="positive integers"):
        sweep_configs(rec, [0])


def test_sweep_configs_add_the_modes_knob_at_the_recipes_own_draft_length():
    """SA's match size and the SA enhancer's threshold (each mode home's proposer facts, `knob`)
    are swept beside the draft length: every value but the recipe's own, at its own γ."""
    sa = load_recipe("tiny-sa")
    g = sa.speculative.max_draft_len
    knobs = [c for c in sweep_configs(sa, [2, g]) if "knob" in c]
    assert [c["knob"] for c in knobs] == [{"max_matching_ngram_size": 3}, {"max_matching_ngram_size": 8}]
    for c in knobs:  # each a valid recipe change, at the recipe's own draft length
        r = load_recipe("tiny-sa", c["overrides"])
        assert c["draft_len"] == r.speculative.max_draft_len == g
        assert r.speculative.max_matching_ngram_size == c["knob"]["max_matching_ngram_size"]
    enhanced = sweep_configs(load_recipe("tiny-eagle3-sa"), None)
    assert [c["label"] for c in enhanced if "knob" in c] == ["threshold=2 γ=3", "threshold=8 γ=3"]
    r = load_recipe("tiny-eagle3-sa", enhanced[-1]["overrides"])
    assert r.speculative.sa_config is not None and r.speculative.sa_config.threshold == 8
    # Without the enhancer EAGLE-3 has no knob; n-gram has none either.
    assert not [c for c in sweep_configs(load_recipe("tiny-eagle3"), None) if "knob" in c]
    assert not [c for c in sweep_configs(load_recipe("tiny-ngram"), None) if "knob" in c]


def test_tune_sweeps_the_knob_into_the_best_setting_not_the_schedule(monkeypatch, tmp_path):
    """tiny-sa at γ = 2 and its own 5, and the match size 3 and 8 at γ = 5: the configuration with
    N = 8 is fastest at every level, so it is the best setting and its overlay carries N; the
    draft_len_schedule (which TensorRT-LLM varies alone) is the draft lengths' own winners."""
    deployed: list[list[str]] = []
    speed = {"baseline": 1.0, "γ=2": 1.3, "γ=5": 1.5, "max_matching_ngram_size=3 γ=5": 1.4}

    def load_at(side, url, model, wl, opts, load, *, label, **kw):
        s = speed.get(label, 1.8)  # max_matching_ngram_size=8 γ=5
        res = BenchResult(endpoint="fake", workload={"name": "code", "prompts": 36}, settings={})
        for c in load.concurrency or (1, 2):
            gap = 1 / (100.0 * s)
            recs = [
                record(i, ttft=gap, gaps=[gap * (1 + 0.01 * (i % 3))] * 11, concurrency=c) for i in range(12)
            ]
            res.levels.append(LevelResult(c, None, recs, duration=1.0))
        return res

    monkeypatch.setattr(side_mod, "load_at", load_at)
    t = tune(
        "tiny-sa",
        method="redeploy",
        draft_lens=[2, 5],
        concurrency=(1, 2),
        deploy_fn=fake_deploy(deployed),
        predict=False,
        check=False,
        report_dir=tmp_path,
        progress=False,
    )
    assert ["speculative.max_draft_len=5", "speculative.max_matching_ngram_size=8"] in deployed
    assert t.best["label"] == "max_matching_ngram_size=8 γ=5"
    assert t.overlay == {"speculative": {"max_draft_len": 5, "max_matching_ngram_size": 8}}
    assert t.schedule == {1: 5, 2: 5}  # γ=5 beats γ=2; the knob rows are not the schedule's
    text = render(t)
    assert "5 (max_matching_ngram_size=8)" in text and "5 (max_matching_ngram_size=3)" in text


def test_tune_redeploy_schedule_and_overlay(fake_measure, tmp_path):
    deployed = []
    pr = PlanResult("tiny-draft-target", "draft_target", "reference", "measured", list(LEVELS))
    pr.predictions = [
        Prediction(
            f"γ={g}", {"max_draft_len": g}, g, 1.0, None, {c: speedup_model(g, c) + 0.1 for c in LEVELS}
        )
        for g in range(1, 5)
    ]
    t = tune(
        "tiny-draft-target",
        method="redeploy",
        draft_lens=[1, 2, 3, 4],
        concurrency=LEVELS,
        deploy_fn=fake_deploy(deployed),
        plan_result=pr,
        report_dir=tmp_path,
        progress=False,
    )
    baseline = ["speculative={mode: none}", "models.draft="]
    # The baseline before the configurations and again after them (drift cancels between the two).
    assert deployed[0] == deployed[5] == baseline
    assert deployed[1:5] == [[f"speculative.max_draft_len={g}"] for g in (1, 2, 3, 4)]
    assert [c["baselines"] for c in t.configs] == [[0, 1]] * 4 and len(t.baselines) == 2
    # Then the tuned schedule itself, deployed as a valid recipe and checked at every level.
    assert deployed[6] == [
        "speculative.max_draft_len=3",
        "speculative.draft_len_schedule={1: 3, 2: 2, 4: 1, 16: 0}",
    ]
    assert load_recipe("tiny-draft-target", deployed[6]).speculative.draft_len_schedule == SCHEDULE
    # And each level's best fixed γ deployed again (the winners at c = 1, 2, 4; γ=1 also at 16).
    assert deployed[7:] == [[f"speculative.max_draft_len={g}"] for g in (3, 2, 1)]
    assert sorted(t.schedule_check) == list(LEVELS) and t.schedule_holds
    for c, v in t.schedule_check.items():
        assert v["best_fixed"] == max(t.cell(g, c).speedup.point for g in (1, 2, 3, 4))
        ci = v["ratio_ci"]
        assert (
            v["ratio_source"] == "paired"
            and ci["lo"] <= v["ratio"] * (1 + 1e-9)
            and ci["hi"] >= v["ratio"] * (1 - 1e-9)
        )
        assert v["best_fixed_again"] == pytest.approx(v["best_fixed"], rel=0.01)
        if SCHEDULE[c]:  # the schedule runs the best fixed γ there
            assert v["ratio"] == pytest.approx(1.0, abs=0.05)
        else:  # speculation off where every γ loses: the schedule beats them all
            assert v["ratio"] > 1.05 and v["best_fixed"] < 1
    # Each winner measured again only at the levels it won (γ=1 at 4 and 16), and kept in tune.json.
    assert [lv.concurrency for lv in t.runs["γ=1 (again)"].levels] == [4, 16]
    assert "γ=3 (again)" in json.loads((tmp_path / "tune.json").read_text())["runs"]
    assert "schedule check" in render(t) and "holds" in render(t) and "measured again" in render(t)
    assert t.method == "redeploy" and len(t.cells) == 4 * len(LEVELS)
    c = t.cell(3, 1)
    assert c.speedup.point == pytest.approx(speedup_model(3, 1), rel=0.03)
    assert c.acceptance_rate == pytest.approx(0.5)
    assert t.schedule == {1: 3, 2: 2, 4: 1, 16: 0}
    assert t.max_concurrency == 4
    assert t.best["draft_len"] == 3
    assert t.overlay == {"speculative": {"max_draft_len": 3}}
    # For TensorRT-LLM: the same schedule, keyed at each run's first and last concurrency, so that
    # 1.2 (lower bounds) and 1.3 (upper bounds, PR #10860) both read sdtk's {1: 3, 2: 2, 4: 1, 16: 0}
    # up to the largest level; max_concurrency is not written beside it (1.3 refuses both).
    frag = t.llmapi_fragment["speculative_config"]
    assert frag == {"max_draft_len": 3, "draft_len_schedule": {1: 3, 2: 2, 3: 2, 4: 1, 15: 1, 16: 0}}
    from toolkit.build.llmapi_schema import read_lower_bounds, read_upper_bounds, validate

    for read in (read_lower_bounds, read_upper_bounds):
        assert [read(frag["draft_len_schedule"], c) for c in (1, 2, 3, 4, 8, 15, 16)] == [3, 2, 2, 1, 1, 1, 0]
    for version in ("1.2.1", "1.3.0"):
        validate(version, {"decoding_type": "NGram", **frag})
    assert t.prediction_error == pytest.approx(0.1, abs=0.02)
    overlay = yaml.safe_load(t.overlay_path.read_text())
    assert overlay == {"speculative": {"max_draft_len": 3}}
    assert "--set speculative.max_draft_len=3" in t.overlay_path.read_text()
    written = (tmp_path / "llmapi-speculative.yaml").read_text()
    assert yaml.safe_load(written) == {"speculative_config": frag} and "1.3 (upper bounds)" in written
    assert {p.name for p in t.report_files} >= {"tune.json", "tune.csv", "recipe-overlay.yaml", "tune.txt"}
    load_recipe("tiny-draft-target", t.best["overrides"])  # the overlay is a valid recipe change
    assert "best per concurrency" in render(t)


def _tune_redeploy(monkeypatch, load_at, tmp_path):
    """tune by redeploying tiny-draft-target at γ = 1..4, its runs made by `load_at`."""
    monkeypatch.setattr(side_mod, "load_at", load_at)
    return tune(
        "tiny-draft-target",
        method="redeploy",
        draft_lens=[1, 2, 3, 4],
        concurrency=LEVELS,
        deploy_fn=fake_deploy([]),
        predict=False,
        report_dir=tmp_path,
        progress=False,
    )


def test_schedule_check_measures_the_lucky_winner_again(fake_measure, monkeypatch, tmp_path):
    """The sweep's γ=3 run is 20% lucky at c=1 (noise): it wins there by more than it should.
    The schedule runs γ=3 at c=1 and measures what γ=3 really gives, so set against the sweep's
    cell it looks 0.83 as good and the check would fail; against γ=3 measured again (paired, on
    the same requests) it is 1.0, and the check holds."""

    def load_at(side, url, model, wl, opts, load, *, label):
        fake_measure.append((label, load.num_draft_tokens, url))
        if label == "draft_len_schedule":
            return run_at(SCHEDULE)
        g = 0 if "baseline" in label else int(label.split("=")[1].split()[0])
        return run_at(g, {1: 1.2} if label == "γ=3" else None, levels=load.concurrency)

    t = _tune_redeploy(monkeypatch, load_at, tmp_path)
    assert [lbl for lbl, _, _ in fake_measure][-3:] == ["γ=3 (again)", "γ=2 (again)", "γ=1 (again)"]
    v = t.schedule_check[1]
    assert v["best_fixed_label"] == "γ=3" and v["best_fixed"] == pytest.approx(
        1.2 * speedup_model(3, 1), rel=0.03
    )
    assert v["scheduled"] / v["best_fixed"] == pytest.approx(1 / 1.2, rel=0.03)  # the sweep cell's verdict
    assert v["best_fixed_again"] == pytest.approx(speedup_model(3, 1), rel=0.03)
    assert v["ratio"] == pytest.approx(1.0, abs=0.01) and v["ratio_source"] == "paired"
    assert t.schedule_holds


def test_schedule_check_keeps_the_sweep_cell_where_measuring_again_failed(
    fake_measure, monkeypatch, tmp_path
):
    """A server that dies while γ=2 (the winner at c=2) is measured again: the check still
    reports, on the sweep's cell at c=2 only; the other winners are measured again (each is a
    deployment of its own) and paired; the tune is partial and says why."""
    from toolkit.bench.errors import BenchAborted

    def load_at(side, url, model, wl, opts, load, *, label):
        if label == "γ=2 (again)":
            raise BenchAborted("server died", cause="the server exited (code -9)")
        if label == "draft_len_schedule":
            return run_at(SCHEDULE)
        return run_at(
            0 if "baseline" in label else int(label.split("=")[1].split()[0]), levels=load.concurrency
        )

    t = _tune_redeploy(monkeypatch, load_at, tmp_path)
    assert t.partial and "γ=2 again" in t.error and "exited" in t.error
    assert {c: v["ratio_source"] for c, v in t.schedule_check.items()} == {
        1: "paired",
        2: "sweep",
        4: "paired",
        16: "paired",
    }
    assert t.schedule_check[2]["ratio_ci"] is None and t.schedule_check[2]["best_fixed_again"] is None
    assert t.schedule_check[2]["ratio"] == pytest.approx(1.0, abs=0.01) and t.schedule_holds
    assert "γ=2 (again)" not in t.runs and "γ=1 (again)" in t.runs
    # The report says which ratio is which, from ratio_source.
    lines = {ln.split(":")[0].strip(): ln for ln in render(t).splitlines() if ln.strip().startswith("c=")}
    assert lines["c=2"].endswith("against the sweep's cell") and lines["c=1"].endswith(", paired")
    assert schedule_ratio_source({"ratio_ci": {"lo": 0.9, "hi": 1.1}}) == "paired"  # files from before
    assert schedule_ratio_source({"ratio_ci": None}) == "sweep"


def test_tune_per_request_uses_num_draft_tokens(fake_measure, tmp_path):
    wd = tmp_path / "wd"
    t = tune(
        "127.0.0.1:8001",
        recipe="tiny-draft-target",
        draft_lens=[1, 2],
        concurrency=(1,),
        predict=False,
        report_dir=tmp_path / "r",
        progress=False,
    )
    assert t.method == "per-request"
    assert [(lbl, n) for lbl, n, _ in fake_measure] == [
        ("γ=0 (baseline)", 0),
        ("γ=1", 1),
        ("γ=2", 2),
        ("γ=0 (baseline)", 0),
    ]
    assert not wd.exists()


def test_tune_brackets_every_configuration_with_baseline_runs(monkeypatch, tmp_path):
    """The machine slows down steadily during the sweep (every run 10% slower than the one
    before). The baseline runs before the first configuration, after every fourth and after the
    last; each configuration is set against the two baseline runs around it, request by request
    (the mean of that request's rate in both), so its speedup is off by the drift within its
    bracket only, not by everything since the sweep began."""
    order: list[str] = []

    def load_at(side, url, model, wl, opts, load, *, label):
        slow = 1 + 0.1 * len(order)  # this run's place in time
        order.append(label)
        g = 0 if label == "baseline" else int(label.split("=")[1])
        res = BenchResult(endpoint="fake", workload={"name": "code", "prompts": 36}, settings={})
        gap = slow / (100.0 * speedup_model(g, 1))
        res.levels.append(LevelResult(1, None, [record(i, ttft=gap, gaps=[gap] * 11) for i in range(8)], 1.0))
        return res

    monkeypatch.setattr(side_mod, "load_at", load_at)
    t = tune(
        "tiny-ngram",
        method="redeploy",
        draft_lens=[1, 2, 3, 4, 5, 6],
        concurrency=(1,),
        deploy_fn=fake_deploy([]),
        predict=False,
        check=False,
        report_dir=tmp_path,
        progress=False,
    )
    assert order == ["baseline", "γ=1", "γ=2", "γ=3", "γ=4", "baseline", "γ=5", "γ=6", "baseline"]
    assert [c["baselines"] for c in t.configs] == [[0, 1]] * 4 + [[1, 2]] * 2
    assert len(t.baselines) == 3

    def slow(label: str, k: int = 0) -> float:
        return 1 + 0.1 * [i for i, x in enumerate(order) if x == label][k]

    for g in range(1, 7):
        b = t.configs[g - 1]["baselines"]
        # Rates are 1/gap: the baseline's rate is the mean of its two runs' rates.
        base_rate = (1 / slow("baseline", b[0]) + 1 / slow("baseline", b[1])) / 2
        expect = speedup_model(g, 1) / slow(f"γ={g}") / base_rate
        assert t.cell(g, 1).speedup.point == pytest.approx(expect, rel=1e-6)
    # Against the first baseline run alone, γ=6 (run 7, 70% slower) would read 1.7× too low.
    assert t.cell(6, 1).speedup.point / speedup_model(6, 1) > 0.95
    assert json.loads((tmp_path / "tune.json").read_text())["configs"][5]["baselines"] == [1, 2]


def test_tune_bad_inputs(tmp_path):
    with pytest.raises(UsageError, match="needs the recipe"):
        tune("127.0.0.1:8001", progress=False)
    with pytest.raises(UsageError, match="no speculation"):
        tune("127.0.0.1:8001", recipe="tiny-baseline", progress=False)
    with pytest.raises(UsageError, match="only for draft_target"):
        tune("127.0.0.1:8001", recipe="tiny-eagle3", method="per-request", progress=False)
    with pytest.raises(UsageError, match="needs a deploy function"):
        tune("127.0.0.1:8001", recipe="tiny-eagle3", progress=False)
    with pytest.raises(UsageError, match="positive integer"):
        tune("127.0.0.1:8001", recipe="tiny-draft-target", concurrency=(0,), progress=False)
    with pytest.raises(UsageError, match="method must be"):
        tune("127.0.0.1:8001", recipe="tiny-draft-target", method="guess", progress=False)


def test_valid_schedule_follows_trtllm_rules():
    """llm_args.py: an entry for batch size 1 equal to max_draft_len, none above it."""
    from toolkit.bench.decide.predict import valid_schedule

    assert valid_schedule({1: 3, 2: 4, 4: 1, 8: 0}) == {1: 3, 2: 3, 4: 1, 8: 0}
    assert valid_schedule({2: 2, 4: 0}) == {1: 2, 2: 2, 4: 0}  # lowest level measured was 2
    assert valid_schedule({1: 0, 2: 0}) is None  # speculation does not pay: no schedule
    assert valid_schedule({}) is None


def test_tune_gives_plan_the_deployments_serving_cost(fake_measure, tmp_path, monkeypatch):
    """On the reference backend, tune measures the per-step serving cost once (its baseline's
    TPOT at c=1 − the probe's plain step) and plan re-predicts the served speedup with it."""
    from toolkit.bench.decide.predict import Probe
    from toolkit.bench.decide.timing import StepTiming

    calls = []
    monkeypatch.setattr(
        tune_run, "add_serving_overhead", lambda pr, rec, o, src, **kw: calls.append((pr, o, src, kw))
    )
    pr = PlanResult("tiny-ngram", "ngram", "reference", "measured", list(LEVELS))
    pr.probe = Probe(2, 8, 0.0, {"name": "code"}, StepTiming(t_base=0.004, forward_points=[(1, 0.004)]), [])
    pr.predictions = [Prediction("γ=2", {"max_draft_len": 2}, 2, 1.0, None, {c: 1.0 for c in LEVELS})]
    t = tune(
        "tiny-ngram",
        method="redeploy",
        draft_lens=[1, 2],
        concurrency=LEVELS,
        deploy_fn=fake_deploy([]),
        plan_result=pr,
        report_dir=tmp_path,
        progress=False,
    )
    assert len(t.baselines) == 2  # before and after the two configurations, alike here
    tpot = t.baseline.level(1).summary()["tpot_s"]["p50"]
    assert len(calls) == 1 and calls[0][0] is pr and calls[0][1] == pytest.approx(tpot - 0.004)
    assert t.settings["serving_overhead_ms"] == pytest.approx((tpot - 0.004) * 1e3, abs=1e-3)
    # At every level the baseline ran: its TPOT there − the plain step at that batch (no batched
    # timings here, so the plain step does not grow).
    by_level = calls[0][3]["by_concurrency"]
    assert sorted(by_level) == list(LEVELS)
    for c in LEVELS:
        assert by_level[c] == pytest.approx(t.baseline.level(c).summary()["tpot_s"]["p50"] - 0.004)
    assert "plan predicted the served speedup: + " in render(t)
    # tune.json keeps the plan behind its predictions, probe included, to re-check offline.
    assert t.to_dict()["plan"]["probe"]["timing"]["t_base"] == 0.004
    assert t.to_dict()["plan"]["predictions"][0]["speedup"] == {c: 1.0 for c in LEVELS}
