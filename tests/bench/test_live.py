"""bench / compare / tune against a real tritonserver serving fake speculative models
(fake_spec/model.py: multi-token chunks, acceptance outputs, server timestamps), over gRPC
streams and HTTP generate_stream; and a server killed mid-benchmark."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from triton_support import serving

from toolkit.bench.api import bench, compare, tune
from toolkit.bench.errors import BenchAborted
from toolkit.bench.report import render

from .conftest import make_fake_repo, tritonserver_missing

pytestmark = [
    pytest.mark.tritonserver,
    pytest.mark.skipif(tritonserver_missing() is not None, reason=str(tritonserver_missing())),
]

MODELS = {
    "base": {"step_ms": 6, "draft_len": 0},
    "spec": {"step_ms": 6, "draft_len": 4, "alpha": 0.8, "draft_cost": 0.05},
    "tensorrt_llm_bls": {"step_ms": 6, "draft_len": 0, "alpha": 0.8, "draft_cost": 0.05, "bls": True},
}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from toolkit.server.launch import TritonServer

    root = tmp_path_factory.mktemp("bench_live")
    repo = make_fake_repo(root, MODELS)
    # serving(): the short stop grace (tests/triton_support.py); test_server_lifecycle.py checks the graceful stop.
    with serving(
        TritonServer(repo, workdir=root / "wd", model_name="spec", auto_ports=True, ready_timeout=90)
    ) as s:
        yield s


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_bench_streams_multi_token_chunks(server, protocol, tmp_path):
    url = server.grpc_url if protocol == "grpc" else server.http_url
    r = bench(
        url,
        protocol=protocol,
        model="spec",
        draft_len=4,
        workload="code",
        max_tokens=24,
        concurrency=[1, 2],
        requests=6,
        warmup=1,
        report_dir=tmp_path,
        progress=False,
    )
    assert not r.partial and [lv.concurrency for lv in r.levels] == [1, 2]
    for lv in r.levels:
        s = lv.summary()
        assert s["ok"] == 6 and s["errors"] == 0 and s["token_counts_exact"]
        assert s["output_tokens"] == 6 * 24
        assert any(k > 1 for rec in lv.records for k in rec.chunk_tokens)  # speculative steps
        assert 0.3 < s["acceptance"]["rate"] < 1.0
        assert s["acceptance"]["length"] > 1.5
        assert s["server_check"]["n"] == 6 and s["server_check"]["violations"] == 0
        assert s["itl_s"]["n"] == 6 * 23 and s["tpot_s"]["p50"] > 0
    assert {p.name for p in r.report_files} == {"bench.json", "bench.csv", "requests.jsonl"}
    assert "sdtk bench:" in render(r)


def compare_base_spec(server, tmp_path, **kw):
    """`compare` of the fake server's base model against its spec model, levels 1 and 2."""
    return compare(
        server.grpc_url,
        server.grpc_url,
        baseline_model="base",
        speculative_model="spec",
        workload="code",
        concurrency=[1, 2],
        report_dir=tmp_path,
        progress=False,
        **kw,
    )


@pytest.mark.alone  # a measured speedup: other tests' load beside it would blur it
def test_compare_live_reports(server, tmp_path):
    ab = compare_base_spec(server, tmp_path, max_tokens=24, requests=8, warmup=1, resamples=500)
    assert len(ab.levels) == 2 and not ab.partial
    lc = ab.levels[0]
    assert lc.paired and lc.pairs == 8
    assert lc.speedup.point > 1.5 and lc.speedup.lo > 1  # ~3.4 tokens per step for ~1.2 steps' time
    assert ab.verdict.startswith("speculative is") and "adopt for ≤" in ab.verdict
    names = {p.name for p in ab.report_files}
    assert {
        "compare.json",
        "compare.csv",
        "latency_vs_concurrency.png",
        "speedup_vs_concurrency.png",
    } <= names


@pytest.mark.parametrize("interleave", [False, True])
def test_compare_order_side_by_side_or_interleaved_by_level(server, tmp_path, interleave):
    """The order the two sides run in, by the server's own clock (each request's arrival and
    last token, server_timestamps): by default the baseline runs all its levels before the
    speculative side starts; `interleave` runs both sides at a level before either starts the
    next. Either way the result holds every level of both sides, paired."""
    ab = compare_base_spec(
        server,
        tmp_path,
        max_tokens=12,
        requests=4,
        warmup=0,
        resamples=200,
        plots=False,
        interleave=interleave,
    )
    assert not ab.partial and [lv.concurrency for lv in ab.levels] == [1, 2]
    assert all(lv.paired and lv.pairs == 4 for lv in ab.levels)
    assert ab.settings["order"] == ("interleaved by level" if interleave else "side by side")

    def span(side, c):
        lv = side.level(c)
        assert lv is not None and all(r.server_arrival_ns and r.server_last_token_ns for r in lv.records)
        return min(r.server_arrival_ns for r in lv.records), max(r.server_last_token_ns for r in lv.records)

    base, spec = ab.baseline, ab.speculative
    assert base is not None and spec is not None
    assert base.settings["concurrency"] == spec.settings["concurrency"] == [1, 2]
    if interleave:
        assert span(base, 1)[1] < span(spec, 1)[0] and span(spec, 1)[1] < span(base, 2)[0]
        assert span(base, 2)[1] < span(spec, 2)[0]
    else:
        assert span(base, 2)[1] < span(spec, 1)[0]


def test_compare_rounds_alternate_the_sides_within_a_level(server, tmp_path):
    """`rounds=2`, by the server's own clock: at each level the baseline runs requests 0-1, the
    speculative side 0-1 then 2-3, the baseline 2-3 (A B, B A), and each side's level holds all 4
    requests, paired, each round a closed loop at the level's concurrency."""
    ab = compare_base_spec(
        server,
        tmp_path,
        max_tokens=12,
        requests=4,
        warmup=1,
        resamples=200,
        plots=False,
        rounds=2,
        interleave=True,
    )
    assert not ab.partial and [lv.concurrency for lv in ab.levels] == [1, 2]
    assert all(lv.paired and lv.pairs == 4 for lv in ab.levels)
    assert ab.settings["rounds"] == 2
    assert (
        "4 requests per level, seed 0; order: interleaved by level, 2 rounds per level (A B, B A, ...)"
        in render(ab)
    )
    base, spec = ab.baseline, ab.speculative
    assert base is not None and spec is not None

    def span(side, c, indices):
        lv = side.level(c)
        assert lv is not None and sorted(r.index for r in lv.records) == [0, 1, 2, 3]
        rs = [r for r in lv.records if r.index in indices]
        assert all(r.ok and r.server_arrival_ns and r.server_last_token_ns for r in rs)
        return min(r.server_arrival_ns for r in rs), max(r.server_last_token_ns for r in rs)

    order = []
    for c in (1, 2):
        first, second = (0, 1), (2, 3)
        order += [span(base, c, first), span(spec, c, first), span(spec, c, second), span(base, c, second)]
    assert all(a[1] < b[0] for a, b in zip(order, order[1:], strict=False))
    # At c=2 both requests of a round were in flight at once: a closed loop at the level's concurrency.
    lv = spec.level(2)
    assert lv is not None
    r0, r1 = (next(r for r in lv.records if r.index == i) for i in (0, 1))
    assert r0.server_arrival_ns < r1.server_last_token_ns and r1.server_arrival_ns < r0.server_last_token_ns


@pytest.mark.alone  # measured speedups per draft length: other tests' load would blur them
def test_tune_per_request_live(server, tmp_path):
    t = tune(
        server.grpc_url,
        recipe="tiny-draft-target",
        model="spec",
        draft_lens=[1, 4],
        concurrency=(1,),
        workload="code",
        max_tokens=20,
        requests=6,
        warmup=0,
        predict=False,
        report_dir=tmp_path,
        progress=False,
        resamples=300,
    )
    assert t.method == "per-request"
    # The served model had no num_draft_tokens; tune switched to the BLS model.
    assert t.baseline is not None and "tensorrt_llm_bls" in t.baseline.endpoint
    s1, s4 = t.cell(1, 1).speedup.point, t.cell(4, 1).speedup.point
    assert s1 > 1 and s4 > s1
    assert t.schedule == {1: 4} and t.overlay == {"speculative": {"max_draft_len": 4}}


def test_killed_server_gives_partial_report_not_a_hang(tmp_path):
    from toolkit.server.launch import TritonServer

    repo = make_fake_repo(tmp_path, {"slow": {"step_ms": 40, "draft_len": 2}})
    with TritonServer(
        repo, workdir=tmp_path / "wd", model_name="slow", auto_ports=True, ready_timeout=90
    ) as s:
        # SIGKILL the whole process group (tritonserver and its Python backend stubs): a crash.
        killer = threading.Timer(2.5, lambda: os.killpg(os.getpgid(s.pid), signal.SIGKILL))
        killer.start()
        t = time.monotonic()
        try:
            with pytest.raises(BenchAborted) as e:
                bench(
                    s.grpc_url,
                    model="slow",
                    workload="code",
                    max_tokens=16,
                    concurrency=[1, 2],
                    requests=40,
                    warmup=0,
                    timeout=30,
                    report_dir=tmp_path / "reports",
                    progress=False,
                )
        finally:
            killer.cancel()
        assert time.monotonic() - t < 25
    err = e.value
    assert err.partial is not None and err.partial.partial
    assert err.report_dir == tmp_path / "reports"
    assert (tmp_path / "reports" / "bench.json").is_file()
    done = sum(lv.summary()["ok"] for lv in err.partial.levels)
    assert done >= 1
    assert "stopped" in str(err) and "partial report in" in str(err)
