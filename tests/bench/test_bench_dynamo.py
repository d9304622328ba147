"""The Dynamo scale-out benchmark (scripts/benchmarks/dynamo.py) without a deployment: the
per-process CPU accounting it reads from /proc, the listening ports it checks after `sdtk stop`,
and the section it writes from a run's measurements (ratio, CI, CPU per token, the CPU ceiling).
The measurements below are inputs to the report's arithmetic, not results; the benchmark itself
runs against a real Dynamo deployment (`scripts/bench.py run dynamo --quick`)."""

from __future__ import annotations

import argparse
import importlib
import os
import socket
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    return importlib.import_module("benchmarks.dynamo")


def _m(tok_s: float, tokens: int, cpu: dict[str, float], served: dict[str, float], wall: float = 10.0):
    return {
        "tok_s": tok_s,
        "tokens": tokens,
        "ok": 32,
        "wall_s": wall,
        "cpu": cpu,
        "served": served,
        "load": 1.0,
    }


def test_cpu_seconds_reads_this_process_from_proc(bench):
    t0 = time.process_time()
    while time.process_time() - t0 < 0.3:
        pass
    mine = bench.cpu_seconds(os.getpid())
    assert abs(mine - time.process_time()) < 0.05 and mine >= 0.3
    assert 0.0 <= bench.cpu_seconds(os.getpid(), system_only=True) < mine
    assert bench.cpu_seconds(2**22 + 12345) == 0.0  # no such process


def test_listening_ports_sees_a_listener_and_its_end(bench):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert port in bench.listening_ports()
    assert port not in bench.listening_ports()


def test_ceiling_names_the_bound_one_worker_core_or_all_cores(bench):
    """1 worker: its core allows 1000/10 = 100 tok/s, the 2 cores 2000/12; 2 workers that each
    cost as much per token of the whole as the single one did (batch halved, memory-bound step):
    each core still allows 100, but all processes together only 2000/22 = 90.9."""
    one = [_m(50, 500, {"frontend": 0.5, "worker-0": 5.0, "client": 0.5}, {"worker-0": 32})]
    two = [_m(50, 500, {"frontend": 0.5, "worker-0": 5.0, "worker-1": 5.0, "client": 0.5}, {"worker-0": 16})]
    assert bench.per_token_ms(one, "worker-0") == pytest.approx(10.0)
    assert bench.ceiling(one, 1, 2) == pytest.approx(100.0)
    assert bench.ceiling(two, 2, 2) == pytest.approx(2000 / 22)


def test_section_reports_ratio_ci_served_counts_and_cpu_per_process(bench):
    cpu1 = {"frontend": 1.0, "worker-0": 9.0, "supervisor": 0.0, "client": 1.0}
    cpu2 = {"frontend": 1.0, "worker-0": 6.0, "worker-1": 6.0, "supervisor": 0.0, "client": 1.0}
    runs = {
        1: [_m(100.0, 2048, cpu1, {"worker-0": 32}), _m(110.0, 2048, cpu1, {"worker-0": 32})],
        2: [
            _m(150.0, 2048, cpu2, {"worker-0": 16, "worker-1": 16}),
            _m(143.0, 2048, cpu2, {"worker-0": 16, "worker-1": 16}),
        ],
    }
    args = argparse.Namespace(
        recipe="tiny-baseline-membound", workload="code", concurrency=8, requests=32, max_tokens=64,
        warmup=8, rounds=2, pin=True, set=["build.max_batch_size=4"],
    )  # fmt: skip
    text = bench.section(args, {"runs": runs, "left": [], "ports": {1, 2, 3}, "max_batch": 4}, (0.5, 0.7))
    lines = text.splitlines()
    assert lines[0] == bench.START and lines[-1] == bench.END
    assert "recipe `tiny-baseline-membound` with `build.max_batch_size=4`, workload `code`" in text
    assert "| 1 | 100.0, 110.0 | 105.0 | 32; 32 |" in text
    assert "| 2 | 150.0, 143.0 | 146.5 | 16, 16; 16, 16 |" in text
    # per-round ratios 1.50 and 1.30: their median 1.40, the bootstrap interval between them
    assert "**2 workers / 1 worker: 1.40× [1.30, 1.50]**" in text and "ratios 1.50, 1.30" in text
    assert "| frontend | 0.49 | 10% | 0.49 | 10% |" in text
    assert "| workers together | 4.39 | 90% | 5.86 | 120% |" in text
    assert "in-flight batches of up to 4 requests each" in text
    assert "4.39 CPU ms per output token with 1 worker and 5.86 with 2 (1.33×)" in text
    assert "one worker batches up to 4 requests per step, each of two workers up to 4" in text
    assert "none of their 3 listening ports still listened on" in text
    left = bench.section(
        args,
        {"runs": runs, "left": ["port(s) 1 still listened on"], "ports": {1}, "max_batch": 4},
        (0.5, 0.7),
    )
    assert "After `sdtk stop`: port(s) 1 still listened on" in left
