"""A/B comparison from synthetic per-request results: keys, verdicts, break-even, reports."""

from __future__ import annotations

import csv
import json

import pytest

from toolkit.bench.api import compare
from toolkit.bench.decide.compare import compare_levels, verdict
from toolkit.bench.measure.metrics import Interval
from toolkit.bench.report import render, write_compare_reports
from toolkit.bench.results import ABResult
from toolkit.bench.targets import resolve_side
from toolkit.errors import RecipeError, ServerError, UsageError

from .conftest import synthetic_run

LEVEL_KEYS = {
    "concurrency",
    "speedup",
    "tpot_speedup",
    "ttft_ratio",
    "throughput_ratio",
    "pairs",
    "paired",
    "baseline",
    "speculative",
}
TOP_KEYS = {
    "kind",
    "baseline",
    "speculative",
    "workload",
    "settings",
    "definitions",
    "levels",
    "verdict",
    "break_even",
    "break_even_basis",
    "adopt_for",
    "partial",
    "error",
    "report_dir",
    "report_files",
    "replayed_acceptance",
    "runs",
    "token_counts_exact",
}


def build(spec_speed: float, slow: float) -> ABResult:
    base = synthetic_run(100.0, levels=(1, 2, 4, 8), seed=1)
    spec = synthetic_run(spec_speed, levels=(1, 2, 4, 8), slowdown_per_level=slow, multi=3, seed=2)
    ab = ABResult(
        "base (url)", "spec (url)", base.workload, {"requests": 20, "seed": 0, "concurrency": [1, 2, 4, 8]}
    )
    ab.baseline, ab.speculative = base, spec
    ab.levels = compare_levels(base, spec, resamples=500, seed=0)
    ab.verdict, ab.break_even, ab.break_even_basis, ab.adopt_for = verdict(ab.levels)
    return ab


def test_report_has_every_key(tmp_path):
    ab = build(180.0, 0.25)
    d = ab.to_dict()
    assert set(d) == TOP_KEYS
    assert len(d["levels"]) == 4
    for lv in d["levels"]:
        assert set(lv) == LEVEL_KEYS
        for k in ("speedup", "tpot_speedup", "ttft_ratio"):
            assert set(lv[k]) == {"point", "lo", "hi", "confidence", "resamples", "method"}
        for side in ("baseline", "speculative"):
            assert {
                "ttft_s",
                "tpot_s",
                "itl_s",
                "chunk_interval_s",
                "tokens_per_chunk",
                "token_counts_exact",
                "token_count_source",
                "e2e_s",
                "output_tok_s",
                "req_s",
                "acceptance",
                "errors",
            } <= set(lv[side])
            assert set(lv[side]["tpot_s"]) == {"n", "mean", "p50", "p90", "p99", "min", "max"}
    assert d["levels"][0]["speculative"]["acceptance"]["rate"] == pytest.approx(2 / 4)
    assert d["levels"][0]["paired"] and d["levels"][0]["pairs"] == 20
    json.dumps(d)  # serialisable


def test_speedup_break_even_and_verdict():
    ab = build(180.0, 0.3)  # spec decodes at 180, 126, 72, 18 tok/s against 100
    sp = [lc.speedup.point for lc in ab.levels]
    # Per-request tok/s includes the 50 ms TTFT: baseline 12 / (0.05 + 11 × 0.01) = 75 tok/s;
    # speculative at c=1: 4 chunks of 3, 12 / (0.05 + 3 × 3/180) = 120 tok/s → 1.6×.
    assert sp[0] == pytest.approx(1.6, rel=0.03) and sp == sorted(sp, reverse=True)
    assert ab.levels[0].speedup.lo > 1 and ab.levels[-1].speedup.hi < 1
    assert ab.break_even == 4 and ab.break_even_basis == "ci"
    assert ab.adopt_for == 2
    assert ab.verdict.startswith("speculative is 1.6")
    assert "faster [" in ab.verdict and "at concurrency 1; break-even at 4; adopt for ≤2" in ab.verdict
    # TPOT speedup is the same comparison seen per token.
    assert ab.levels[0].tpot_speedup.point > 1.5


def test_verdict_wordings():
    def lc(c, p, lo, hi):
        from toolkit.bench.results import LevelComparison

        i = Interval(p, lo, hi)
        return LevelComparison(c, i, i, i, p, 10, True, {}, {})

    v, be, basis, adopt = verdict([lc(1, 1.02, 0.95, 1.1), lc(2, 0.97, 0.9, 1.05)])
    assert v.startswith("no significant difference at concurrency 1 (1.02× [0.95, 1.10])")
    assert (be, basis, adopt) == (2, "point", None) and "(point estimate)" in v and v.endswith("do not adopt")
    v, be, _, adopt = verdict([lc(1, 0.8, 0.7, 0.9)])
    assert v.startswith("speculative is slower: 0.80× [0.70, 0.90]") and be == 1 and adopt is None
    v, be, _, adopt = verdict([lc(1, 2.0, 1.8, 2.2), lc(4, 1.5, 1.2, 1.7)])
    assert "no break-even up to concurrency 4; adopt for ≤4" in v and be is None and adopt == 4
    assert verdict([])[0].startswith("no comparable")


def test_reports_written(tmp_path):
    ab = build(180.0, 0.25)
    for lc in ab.levels:
        lc.speculative["acceptance"]["per_position"] = [0.8, 0.6, 0.4]
    files = write_compare_reports(ab, tmp_path)
    names = {p.name for p in files}
    assert {
        "compare.json",
        "compare.csv",
        "requests.jsonl",
        "latency_vs_concurrency.png",
        "speedup_vs_concurrency.png",
        "acceptance_per_position.png",
    } == names
    for p in files:
        assert p.stat().st_size > 0
        if p.suffix == ".png":
            assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = list(csv.reader((tmp_path / "compare.csv").open()))
    assert rows[0][0] == "concurrency" and len(rows) == 5
    recs = (tmp_path / "requests.jsonl").read_text().splitlines()
    assert len(recs) == 2 * 4 * 20 and {json.loads(r)["side"] for r in recs} == {"baseline", "speculative"}
    assert not list(tmp_path.glob("*.incomplete*"))
    assert "verdict: speculative is" in render(ab)
    # The human output carries what the demo shows: acceptance per draft position and the plot paths.
    ab.report_files = files
    text = render(ab)
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("acceptance per draft position"))
    assert lines[head + 1].split() == ["concurrency", "pos", "1", "pos", "2", "pos", "3"]
    assert [line.split() for line in lines[head + 3 : head + 7]] == [
        [str(lc.concurrency), "0.80", "0.60", "0.40"] for lc in ab.levels
    ]
    plots = sorted(line.removeprefix("plot: ") for line in lines if line.startswith("plot: "))
    assert plots == sorted(str(p) for p in files if p.suffix == ".png") and len(plots) == 3


def test_resolve_side_errors(tmp_path):
    assert resolve_side("127.0.0.1:8001", label="baseline").kind == "url"
    assert resolve_side("grpc://localhost:8001", label="baseline").kind == "url"
    s = resolve_side("http://127.0.0.1:8000", label="x", protocol="http", model="ensemble")
    assert (s.kind, s.model) == ("url", "ensemble")
    with pytest.raises(UsageError, match="HTTP URL but the protocol is grpc"):
        resolve_side("http://127.0.0.1:8000", label="baseline")
    with pytest.raises(UsageError, match="no running deployment"):
        resolve_side(tmp_path, label="baseline")
    (tmp_path / "state.json").write_text(
        json.dumps(
            {
                "pid": 999999,
                "pgid": 999999,
                "start_ticks": 1,
                "started_at": 0,
                "http_url": "http://127.0.0.1:1",
                "grpc_url": "127.0.0.1:2",
                "metrics_url": "",
                "model_name": "ensemble",
                "model_repo": "",
                "argv": [],
                "log_path": "",
                "workdir": str(tmp_path),
            }
        )
    )
    with pytest.raises(ServerError, match="is not running"):
        resolve_side(tmp_path, label="baseline")
    assert resolve_side("tiny-draft-target", label="speculative").kind == "recipe"
    with pytest.raises(RecipeError, match="did you mean"):
        resolve_side("tiny-draft-targt", label="speculative")


def test_compare_checks_inputs_before_running(tmp_path):
    with pytest.raises(UsageError, match="positive integer"):
        compare("127.0.0.1:1", "127.0.0.1:2", concurrency=[0], report_dir=tmp_path)
    with pytest.raises(UsageError, match="no deploy function"):
        compare("tiny-baseline", "tiny-draft-target", concurrency=[1], report_dir=tmp_path, progress=False)


def test_deployed_address_accepts_pairs_and_handles():
    from types import SimpleNamespace

    from toolkit.bench.targets import deployed_address

    assert deployed_address(("127.0.0.1:8001", "ensemble"), "grpc") == ("127.0.0.1:8001", "ensemble")
    h = SimpleNamespace(grpc_url="127.0.0.1:9001", http_url="http://127.0.0.1:9000", model_name="ensemble")
    assert deployed_address(h, "grpc") == ("127.0.0.1:9001", "ensemble")
    assert deployed_address(h, "http") == ("http://127.0.0.1:9000", "ensemble")
    with pytest.raises(UsageError, match="HTTP address"):
        deployed_address(("http://127.0.0.1:8000", "ensemble"), "grpc")
    with pytest.raises(UsageError, match="not \\(url, model\\)"):
        deployed_address(object(), "grpc")


def test_memory_bound_twin_is_labelled_in_reports():
    """Numbers measured on a padded target always say so: the side, bench's report and JSON."""
    label = "memory-bound twin: target padded ×32, 0.46 GB per step"
    twin = resolve_side("tiny-eagle3-membound", label="speculative")
    assert twin.twin == label and twin.describe().endswith(f"(recipe; {label})")
    assert resolve_side("tiny-eagle3", label="speculative").twin is None
    run = synthetic_run(100.0, levels=(1,))
    run.twin = twin.twin
    assert label in render(run).splitlines()[:3] and run.to_dict()["twin"] == label
