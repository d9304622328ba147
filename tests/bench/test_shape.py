"""bench's shape: `decide` is pure functions over measurements, every measurement goes
through one `measure_side`, a side carries its recipe parsed once, and progress is a Step as
everywhere in sdtk (the size bounds of every module: tests/unit/test_bounds.py)."""

from __future__ import annotations

import ast
import contextlib
from pathlib import Path

import pytest
import tomllib

from toolkit.bench.decide import compare as compare_mod
from toolkit.bench.measure.loadgen import BenchResult, LevelResult
from toolkit.bench.measure.records import count_steps_from_chunks
from toolkit.bench.options import CompareOptions, RunOptions, bars_enabled
from toolkit.bench.orchestrate import compare as compare_run
from toolkit.bench.orchestrate import side as side_mod
from toolkit.bench.orchestrate.side import Load, measure_side
from toolkit.bench.results import ABResult
from toolkit.bench.targets import resolve_side
from toolkit.progress import quiet

from .conftest import FakeEndpoint, record, synthetic_run

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "toolkit" / "bench"
# What measures (deploys, sends load, runs a model, reads the hub or a tokenizer): never in decide.
MEASURING = (
    "toolkit.bench.api",
    "toolkit.bench.orchestrate",
    "toolkit.bench.report",
    "toolkit.bench.targets",
    "toolkit.bench.measure.loadgen",
    "toolkit.bench.measure.inprocess",
    "toolkit.bench.measure.replay",
    "toolkit.bench.measure.tokens",
    "toolkit.deploy",
    "toolkit.server",
    "toolkit.client",
    "toolkit.reference",
    "toolkit.hub",
    "toolkit.membound",
    "toolkit.runner",
)


def _imports(path: Path) -> set[str]:
    """Every module a file imports, at module level or inside a function."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_decide_imports_nothing_that_measures():
    for path in sorted((BENCH / "decide").glob("*.py")):
        bad = {m for m in _imports(path) if m.startswith(MEASURING)}
        assert not bad, f"{path.name} imports {sorted(bad)}"
    # lint-imports holds the indirect imports too, through this contract.
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    pure = next(c for c in contracts if c.get("source_modules") == ["toolkit.bench.decide"])
    assert pure["type"] == "forbidden" and set(pure["forbidden_modules"]) == set(MEASURING)
    assert not pure.get("allow_indirect_imports", False)


def _run(seconds_per_token: dict[int, float], n: int = 8) -> BenchResult:
    """n requests of 10 tokens per level, one token every `seconds_per_token[c]` s (TTFT included)."""
    run = BenchResult("fake", {"name": "code"}, {})
    for c, dt in seconds_per_token.items():
        recs = [record(i, ttft=dt, gaps=[dt] * 9, concurrency=c) for i in range(n)]
        run.levels.append(LevelResult(c, None, recs, duration=1.0))
    return run


def test_compare_decides_over_hand_built_runs():
    """decide.compare over hand-built runs: 2× at c=1 and 2, half as fast at c=4."""
    base = _run({1: 0.1, 2: 0.1, 4: 0.1})  # 10 tok/s per user
    spec = _run({1: 0.05, 2: 0.05, 4: 0.2})  # 20, 20, then 5 tok/s
    ab = ABResult("base", "spec", {"name": "code"}, {})
    compare_mod.finish(ab, {"baseline": base, "speculative": spec}, 200, 0, 0.95)
    assert [lc.concurrency for lc in ab.levels] == [1, 2, 4]
    assert all(lc.paired and lc.pairs == 8 for lc in ab.levels)
    assert [lc.speedup.point for lc in ab.levels] == pytest.approx([2.0, 2.0, 0.5])
    assert [lc.tpot_speedup.point for lc in ab.levels] == pytest.approx([2.0, 2.0, 0.5])
    assert (ab.break_even, ab.break_even_basis, ab.adopt_for) == (4, "ci", 2)
    assert ab.verdict == (
        "speculative is 2.00× faster [2.00, 2.00] at concurrency 1; break-even at 4; adopt for ≤2"
    )
    compare_mod.mark_partial(ab, "speculative", "server gone")
    assert ab.partial and ab.error == "speculative: server gone" and ab.verdict.startswith("PARTIAL")
    # A side that never ran: nothing compared, and the verdict says so.
    none = ABResult("base", "spec", {}, {})
    compare_mod.finish(none, {"baseline": base, "speculative": None}, 200, 0, 0.95)
    assert none.levels == [] and none.verdict.startswith("no comparable measurements")


def test_steps_from_chunks_counts_each_nonempty_chunk():
    run = BenchResult("fake", {}, {})
    run.levels = synthetic_run(100.0, levels=(1,), n=2).levels
    r = run.levels[0].records[0]
    r.draft_tokens, r.streamed, r.chunk_tokens = 6, True, [2, 0, 3, 1]
    count_steps_from_chunks(run)
    assert r.steps == 3 and r.steps_source == "streamed chunks (one per step)"
    assert run.levels[0].records[1].steps is None  # no draft counts: nothing to count


@pytest.fixture
def fake_endpoints(monkeypatch):
    """TritonEndpoint in measure_side replaced by FakeEndpoint; the addresses it was given."""
    made: list[tuple[str, str]] = []

    def endpoint(url, *, model, protocol, timeout):
        made.append((url, model))
        return FakeEndpoint()

    monkeypatch.setattr(side_mod, "TritonEndpoint", endpoint)
    return made


def test_measure_side_runs_a_url_side(fake_endpoints):
    side = resolve_side("127.0.0.1:8001", label="baseline", model="ensemble")
    side.draft_len, side.twin = 4, "twin ×2"
    opts = RunOptions(requests=3, warmup=0, progress=False, allow_inexact=True)
    run = measure_side(side, _workload(opts), opts, Load(concurrency=[1, 2], num_draft_tokens=2))
    assert fake_endpoints == [("127.0.0.1:8001", "ensemble")]
    assert [lv.concurrency for lv in run.levels] == [1, 2] and run.twin == "twin ×2"
    assert run.settings["draft_len"] == 4 and run.settings["sampling"] == {"num_draft_tokens": 2}
    assert all(r.ok and r.draft_len == 2 for lv in run.levels for r in lv.records)


def test_a_recipe_side_is_parsed_once_and_deployed_as_parsed(fake_endpoints, monkeypatch):
    """The Recipe resolve_side loaded is what the deploy function gets and what the replay reads."""
    side = resolve_side("tiny-ngram", label="speculative")
    assert side.kind == "recipe" and side.recipe is not None and side.recipe.mode == "ngram"
    got: list[object] = []

    @contextlib.contextmanager
    def deploy_fn(recipe, **kw):
        got.append(recipe)
        yield "127.0.0.1:9", "ensemble"

    opts = RunOptions(requests=2, warmup=0, progress=False, allow_inexact=True)
    measure_side(side, _workload(opts), opts, Load(concurrency=[1]), deploy_fn=deploy_fn)
    assert got == [side.recipe] and got[0] is side.recipe
    assert fake_endpoints == [("127.0.0.1:9", "ensemble")]
    seen: list[object] = []
    monkeypatch.setattr(compare_run.replay_mod, "replayable", lambda rec, t: seen.append(rec) or False)
    assert compare_run.replay_side(side, _workload(opts), opts, None) is None
    assert seen == [side.recipe]


def test_progress_is_a_step_or_a_bool():
    said: list[str] = []
    assert RunOptions(progress=said.append).steps("plan") == said.append
    RunOptions(progress=said.append).steps("plan")("timing forwards")
    assert said == ["timing forwards"]
    assert RunOptions(progress=False).steps("plan") is quiet
    assert (bars_enabled(True), bars_enabled(said.append), bars_enabled(False), bars_enabled(quiet)) == (
        True,
        True,
        False,
        False,
    )


def test_compare_and_tune_record_the_same_run_settings():
    opts = RunOptions(requests=5, duration=2.0, seed=3, temperature=0.5)
    assert list(opts.settings()) == [
        "requests",
        "duration",
        "warmup",
        "seed",
        "protocol",
        "temperature",
        "timeout",
    ]
    assert "duration" not in opts.settings(duration=False)
    assert opts.settings()["requests"] == 5 and opts.settings(duration=False)["seed"] == 3


def _workload(opts: RunOptions):
    from toolkit.bench.measure.workloads import workload_for

    return workload_for(opts)


def test_rounds_schedule_flips_the_order_every_round():
    """--rounds K: per level, requests [k·N/K, (k+1)·N/K) by both sides, A B then B A, ...;
    without rounds, both sides per level (interleaved) or each side's levels at once."""
    assert compare_run.schedule([1, 4], 5, True, 2) == [
        (0, [1], (0, 2)),
        (1, [1], (0, 2)),
        (1, [1], (2, 5)),
        (0, [1], (2, 5)),
        (0, [4], (0, 2)),
        (1, [4], (0, 2)),
        (1, [4], (2, 5)),
        (0, [4], (2, 5)),
    ]
    assert [part for _, _, part in compare_run.schedule([1], 24, True, 3)[::2]] == [(0, 8), (8, 16), (16, 24)]
    assert compare_run.schedule([1, 4], 5, True, 1) == [
        (0, [1], None),
        (1, [1], None),
        (0, [4], None),
        (1, [4], None),
    ]
    assert compare_run.schedule([1, 4], 5, False, 1) == [(0, [1, 4], None), (1, [1, 4], None)]


def test_rounds_need_a_closed_loop_per_round():
    """Each round runs at its level's concurrency: fewer requests per round than clients, a
    duration per level, or a count below 1 is refused before anything is deployed, with the fix."""
    from toolkit.errors import UsageError

    compare_run.check_rounds(3, RunOptions(requests=24), [1, 2, 4, 8])
    with pytest.raises(UsageError, match="leave 6 per round, fewer than the 8 clients") as e:
        compare_run.check_rounds(4, RunOptions(requests=24), [1, 8])
    assert e.value.hint == "at most 3 rounds with --requests 24, or --requests 32 or more"
    with pytest.raises(UsageError, match="do not combine with a duration"):
        compare_run.check_rounds(2, RunOptions(requests=24, duration=5.0), [1])
    with pytest.raises(UsageError, match="positive integer"):
        compare_run.check_rounds(0, RunOptions(), [1])


def _two_rounds(opts: RunOptions, deploy_fn):
    """run_compare of the recipes tiny-baseline and tiny-ngram at c = 1, 2 in two rounds per level."""
    from toolkit.bench.measure.workloads import workload_for

    sides = [resolve_side("tiny-baseline", label="baseline"), resolve_side("tiny-ngram", label="speculative")]
    options = CompareOptions(resamples=50, confidence=0.9, replay=False, interleave=True, rounds=2)
    return compare_run.run_compare(sides, workload_for(opts), opts, options, levels=[1, 2], deploy_fn=deploy_fn)


def test_rounds_deploy_each_side_once_and_join_each_level(monkeypatch):
    """With rounds, both recipe sides are deployed once for the whole run, each side is warmed
    once, the measurements alternate A B, B A per level, and each side's level joins its rounds'
    requests under their own indices and seeds: the same pairs as one closed loop of N."""

    endpoints: list[tuple[str, FakeEndpoint]] = []

    def endpoint(url, *, model, protocol, timeout):
        endpoints.append((url, FakeEndpoint()))
        return endpoints[-1][1]

    monkeypatch.setattr(side_mod, "TritonEndpoint", endpoint)
    deployed: list[str] = []

    @contextlib.contextmanager
    def deploy_fn(recipe, **kw):
        deployed.append(recipe.display_name)
        yield f"127.0.0.1:{len(deployed)}", "ensemble"

    ab = _two_rounds(RunOptions(requests=5, warmup=1, progress=False, allow_inexact=True), deploy_fn)
    assert deployed == ["tiny-baseline", "tiny-ngram"]
    base, spec = "127.0.0.1:1", "127.0.0.1:2"
    assert [url for url, _ in endpoints] == [base, spec, spec, base, base, spec, spec, base]
    # Requests sent per measurement: a warm-up before each side's first, then rounds of 2 and 3.
    assert [len(ep.sent) for _, ep in endpoints] == [3, 3, 3, 3, 2, 2, 3, 3]
    seeds = [ep.sent[-1][1] for _, ep in endpoints]
    assert seeds == [1, 1, 4, 4, 1, 1, 4, 4]  # each round's last request keeps its own seed (seed + index)
    assert ab.settings["rounds"] == 2 and "2 rounds per level" in ab.settings["order"]
    assert not ab.partial and [lv.concurrency for lv in ab.levels] == [1, 2]
    assert all(lv.paired and lv.pairs == 5 for lv in ab.levels)
    for run in (ab.baseline, ab.speculative):
        assert run is not None and "part" not in run.settings and run.settings["concurrency"] == [1, 2]
        assert [[r.index for r in lv.records] for lv in run.levels] == [[0, 1, 2, 3, 4]] * 2


def test_a_server_dying_in_a_round_stops_the_comparison_with_what_was_measured(monkeypatch):
    """The speculative side's server dies in its second round at c=1 (rounds=2, A B B A): the
    comparison stops at once with a partial ABResult that names the side, keeps every request
    measured so far under its own index (the baseline's first round, the speculative side's
    first round and the second round's one success), and never starts the baseline's second round
    or the next level; both deployments are stopped."""
    from toolkit.bench.errors import BenchAborted

    endpoints: list[tuple[str, FakeEndpoint]] = []

    def endpoint(url, *, model, protocol, timeout):
        dies = len(endpoints) == 2  # the third measurement: the speculative side's second round
        endpoints.append((url, FakeEndpoint(fail_after=1) if dies else FakeEndpoint()))
        return endpoints[-1][1]

    monkeypatch.setattr(side_mod, "TritonEndpoint", endpoint)
    stopped: list[str] = []

    @contextlib.contextmanager
    def deploy_fn(recipe, **kw):
        try:
            yield f"127.0.0.1:{len(stopped) + 10}-{recipe.display_name}", "ensemble"
        finally:
            stopped.append(recipe.display_name)

    with pytest.raises(BenchAborted) as e:
        _two_rounds(RunOptions(requests=6, warmup=0, progress=False, allow_inexact=True), deploy_fn)
    assert len(endpoints) == 3 and sorted(stopped) == ["tiny-baseline", "tiny-ngram"]
    ab = e.value.partial
    assert ab.partial and ab.error.startswith("speculative: the server stopped answering")
    assert [[r.index for r in lv.records] for lv in ab.baseline.levels] == [[0, 1, 2]]
    spec = ab.speculative.levels
    assert len(spec) == 1 and spec[0].partial and [r.index for r in spec[0].records if r.ok] == [0, 1, 2, 3]
