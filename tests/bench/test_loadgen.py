"""The load generator against an in-process fake endpoint: limits, determinism, timeouts and
what happens when the server dies; plus bad inputs against a real (closed) port."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from toolkit.bench.api import bench
from toolkit.bench.errors import BenchAborted, WorkloadError
from toolkit.bench.measure.loadgen import (
    Chunk,
    Sampling,
    TritonEndpoint,
    check_levels,
    chunk_token_counts,
    cumulative_counts,
    run_load,
)
from toolkit.bench.measure.workloads import load_workload
from toolkit.client import ServerUnreachable
from toolkit.errors import UsageError

from .conftest import FakeEndpoint


def run(coro):
    return asyncio.run(coro)


def test_closed_loop_levels_and_counts():
    ep = FakeEndpoint(chunks=3, k=2)
    wl = load_workload("code")
    res = run(run_load(ep, wl, concurrency=[1, 3], requests=9, warmup=2, seed=1, progress=False))
    assert ep.checked
    assert [lv.concurrency for lv in res.levels] == [1, 3]
    for lv in res.levels:
        s = lv.summary()
        assert s["requests"] == 9 and s["ok"] == 9 and s["errors"] == 0
        assert s["output_tokens"] == 9 * 6
        assert s["acceptance"]["rate"] == pytest.approx(3 / 9)  # 3 accepted of 9 drafted per request
        assert [r.index for r in lv.records] == list(range(9))
        assert all(r.chunk_tokens == [2, 2, 2] for r in lv.records)
    assert ep.max_inflight == 3
    assert len(ep.sent) == 2 + 9 + 9  # warm-up requests are sent but not recorded
    assert res.to_dict()["levels"][0]["summary"]["ok"] == 9


def test_same_seed_same_requests():
    wl = load_workload("chat")
    a, b = FakeEndpoint(), FakeEndpoint()
    run(run_load(a, wl, concurrency=[1], requests=6, warmup=0, seed=42, progress=False))
    run(run_load(b, wl, concurrency=[1], requests=6, warmup=0, seed=42, progress=False))
    assert a.sent == b.sent
    assert [s for _, s in a.sent] == [42 + i for i in range(6)]  # per-request sampling seeds
    c = FakeEndpoint()
    run(run_load(c, wl, concurrency=[1], requests=6, warmup=0, seed=43, progress=False))
    assert [p for p, _ in c.sent] != [p for p, _ in a.sent]


def test_poisson_rate_and_duration_limit():
    ep = FakeEndpoint(chunks=2, delay=0.001)
    wl = load_workload("math")
    t = time.monotonic()
    res = run(run_load(ep, wl, concurrency=None, rate=200.0, requests=20, warmup=0, seed=3, progress=False))
    assert res.levels[0].rate == 200.0 and res.levels[0].concurrency is None
    assert res.levels[0].summary()["ok"] == 20
    assert time.monotonic() - t < 5
    slow = FakeEndpoint(chunks=5, delay=0.05)
    res = run(run_load(slow, wl, concurrency=[1], requests=100, duration=0.6, warmup=0, progress=False))
    assert 1 <= res.levels[0].summary()["requests"] < 10


def test_request_timeout_does_not_hang():
    ep = FakeEndpoint(hang=True)  # a stuck server that still says it is ready
    t = time.monotonic()
    with pytest.raises(BenchAborted, match="every request failed") as e:
        run(
            run_load(
                ep, load_workload("code"), concurrency=[2], requests=2, warmup=0, timeout=0.3, progress=False
            )
        )
    assert time.monotonic() - t < 3
    s = e.value.partial.levels[0].summary()
    assert s["errors"] == 2 and s["error_kinds"] == {"timeout": 2}


def test_dead_server_gives_partial_result_and_error():
    ep = FakeEndpoint(chunks=2, fail_after=6)  # requests 7.. fail: the server died
    t = time.monotonic()
    with pytest.raises(BenchAborted) as e:
        run(run_load(ep, load_workload("code"), concurrency=[1, 2], requests=4, warmup=0, progress=False))
    assert time.monotonic() - t < 5
    part = e.value.partial
    assert part.partial and "stopped answering" in part.error
    assert part.levels[0].summary()["ok"] == 4 and not part.levels[0].partial  # c=1 finished
    lv2 = part.levels[1]
    assert lv2.partial and lv2.summary()["ok"] == 2 and lv2.summary()["errors"] >= 1
    assert lv2.summary()["error_kinds"].get("connection", 0) >= 1
    assert "stopped" in str(e.value) and e.value.hint


def test_consistently_failing_model_aborts():
    ep = FakeEndpoint(fail_after=0, fail_kind="model", alive=True)
    ep._alive = True
    with pytest.raises(BenchAborted, match="failed in a row"):
        run(run_load(ep, load_workload("code"), concurrency=[1], requests=50, warmup=0, progress=False))


def test_chunk_token_counts():
    # The server's counts are per response (docs/contracts.md): summed, never differenced.
    c = [Chunk(0.0, "a", {"num_output_tokens": v}) for v in (1, 2, 2, 3, 0)]
    assert chunk_token_counts(c) == ([1, 2, 2, 3, 0], "server")
    # One chunk without a count: the tokenizer (over the cumulative text) or an estimate.
    d = [Chunk(0.0, "ab", {"num_output_tokens": 2}), Chunk(0.0, "c")]
    assert chunk_token_counts(d) == ([1, 1], "estimate")
    e = [Chunk(0.0, "ab"), Chunk(0.0, ""), Chunk(0.0, "c")]
    assert chunk_token_counts(e) == ([1, 0, 1], "estimate")
    assert chunk_token_counts(e, count_tokens=len) == ([2, 0, 1], "tokenizer")


def test_cumulative_counts_follow_merges_across_chunks():
    """A toy BPE where "abc" is one token: chunk by chunk, "ab" + "c" would count 3; the
    growing text says 2 then 1, and no chunk may get a negative count."""

    def count(text: str) -> int:
        return len(text.replace("abc", "X"))

    assert [count(t) for t in ("ab", "abc")] == [2, 1]
    assert cumulative_counts(["ab", "c"], count) == [1, 0]
    texts = ["x", "ab", "c", "", "ab", "cd"]
    counts = cumulative_counts(texts, count)
    assert sum(counts) == count("".join(texts)) == 4 and min(counts) >= 0


def test_bad_levels():
    for bad in ([0], [-2], [1.5], [True], []):
        with pytest.raises(UsageError):
            check_levels(bad, None)
    with pytest.raises(UsageError, match="not both"):
        check_levels([1], 2.0)
    with pytest.raises(UsageError, match="> 0"):
        check_levels(None, 0.0)
    wl = load_workload("code")
    for kw in ({"requests": 0}, {"duration": -1.0}, {"warmup": -1}, {"timeout": 0}):
        with pytest.raises(UsageError):
            run(run_load(FakeEndpoint(), wl, concurrency=[1], progress=False, **kw))


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_unreachable_url_fails_fast(protocol, tmp_path):
    port = _closed_port()
    url = f"127.0.0.1:{port}" if protocol == "grpc" else f"http://127.0.0.1:{port}"
    t = time.monotonic()
    with pytest.raises(ServerUnreachable) as e:
        bench(
            url,
            protocol=protocol,
            concurrency=[1],
            requests=1,
            warmup=0,
            progress=False,
            report_dir=tmp_path / "r",
        )
    assert time.monotonic() - t < 10
    assert "127.0.0.1" in str(e.value) and e.value.hint


def test_bench_bad_inputs_before_any_request(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(WorkloadError, match="empty"):
        bench("127.0.0.1:1", prompts_file=empty, workload=None, progress=False)
    with pytest.raises(UsageError, match="positive integer"):
        bench("127.0.0.1:1", concurrency=[0], progress=False)
    with pytest.raises(UsageError, match="positive integer"):
        bench("127.0.0.1:1", concurrency=[-4], progress=False)
    with pytest.raises(UsageError, match="protocol"):
        bench("127.0.0.1:1", protocol="udp", progress=False)
    with pytest.raises(UsageError, match="not a URL"):
        bench(tmp_path / "nothing.yaml", progress=False)


def test_triton_endpoint_validates_protocol():
    with pytest.raises(UsageError):
        TritonEndpoint("127.0.0.1:1", protocol="ftp")
    assert Sampling(temperature=0.5).to_dict() == {"temperature": 0.5}


def test_silent_server_fails_the_preflight(monkeypatch):
    import toolkit.bench.measure.loadgen as lg

    class Silent(FakeEndpoint):
        async def check(self):
            await asyncio.sleep(3600)

    monkeypatch.setattr(lg, "CHECK_TIMEOUT", 0.2)
    with pytest.raises(lg.ServerError, match="did not answer within 0.2s"):
        run(run_load(Silent(), load_workload("code"), concurrency=[1], progress=False))


def test_a_run_where_every_request_fails_is_an_error():
    ep = FakeEndpoint(fail_after=0, fail_kind="model", alive=True)
    with pytest.raises(
        BenchAborted, match="every request failed; first error: ClientError: fake: model error"
    ) as e:
        run(run_load(ep, load_workload("code"), concurrency=[1], requests=3, warmup=0, progress=False))
    assert e.value.partial.levels[0].summary()["errors"] == 3
