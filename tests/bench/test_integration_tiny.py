"""End to end on the embedded Triton with the tiny recipes: a real A/B of tiny-baseline vs
tiny-draft-target on the code workload, and a deployment killed mid-benchmark.

Needs a tritonserver (the `server` extra: nvidia-pytriton) and the trained tiny models
(models/tiny/{target,draft}, scripts/train_tiny_models.py); each test is skipped with the
missing one named. Deployments go through `toolkit.deploy.deployed`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from triton_support import STOP_GRACE_S

from toolkit.bench.api import bench, compare
from toolkit.bench.errors import BenchAborted
from toolkit.bench.report import render
from toolkit.deploy import deployed
from toolkit.recipe import load_recipe
from toolkit.server.state import stop_server

from .conftest import tritonserver_missing

TINY = Path(os.environ.get("SDTK_TINY_MODELS") or Path(__file__).resolve().parents[2] / "models" / "tiny")

pytestmark = [pytest.mark.tritonserver, pytest.mark.slow]


@pytest.fixture(scope="module")
def deploy_fn():
    missing = tritonserver_missing()
    if missing:
        pytest.skip(missing)
    for sub in ("target", "draft"):
        assert (TINY / sub / "config.json").is_file(), f"{TINY / sub} is missing (models/tiny is committed)"
    return _deployed


@contextlib.contextmanager
def _deployed(*args: Any, **kwargs: Any) -> Iterator[Any]:
    """toolkit.deploy.deployed, stopped first with the short grace of tests/triton_support.py (its
    own stop, graceful for up to 15 s, then finds nothing left to stop): the stop is not what these
    tests check (tests/server/test_server_lifecycle.py and `sdtk stop` in tests/integration do)."""
    with deployed(*args, **kwargs) as result:
        try:
            yield result
        finally:
            stop_server(result.workdir, grace=STOP_GRACE_S)


def _server_group(url: str) -> int | None:
    """The process group of the tritonserver listening on the port of `url` (found through /proc)."""
    port = url.rstrip("/").rsplit(":", 1)[-1]
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        text = [a.decode(errors="replace") for a in argv]
        if text and text[0].endswith("tritonserver") and any(a.endswith(f"-port={port}") for a in text):
            return os.getpgid(int(entry.name))
    return None


def test_ab_tiny_baseline_vs_draft_target(deploy_fn, tmp_path):
    ab = compare(
        "tiny-baseline",
        "tiny-draft-target",
        workload="code",
        max_tokens=32,
        concurrency=[1, 2],
        requests=8,
        warmup=2,
        deploy_fn=deploy_fn,
        report_dir=tmp_path,
        progress=False,
        resamples=1000,
    )
    assert not ab.partial and [lc.concurrency for lc in ab.levels] == [1, 2]
    for lc in ab.levels:
        assert lc.baseline["ok"] == 8 and lc.speculative["ok"] == 8
        assert lc.speedup.point is not None and lc.speedup.lo is not None
        assert lc.speculative["acceptance"]["rate"] is not None
        # γ comes from the recipe, so the server's draft counts give the acceptance length.
        assert lc.speculative["acceptance"]["length"] > 1
    assert ab.verdict
    # Acceptance per draft position, from the in-process replay of the same 8 requests (a chain of the
    # recipe's γ: P(positions 1..k accepted) falls with k). The server's counters for the same requests are kept
    # next to it; the BLS's totals do not equal the replay's (a known discrepancy of the BLS loop's
    # counters, see docs/lab/benchmarks-history.md), the ensemble modes' do (tests/bench/test_replay.py).
    rp = ab.replayed
    gamma = load_recipe("tiny-draft-target").speculative.max_draft_len
    assert rp is not None and rp.requests == 8 and len(rp.per_position) == gamma
    assert rp.server_draft_tokens == sum(r.draft_tokens for r in ab.speculative.levels[0].records)
    assert rp.draft_tokens > 0 and 0 < rp.accepted_draft_tokens <= rp.draft_tokens
    assert 1 >= rp.per_position[0] >= rp.per_position[-1] >= 0
    names = {p.name for p in ab.report_files}
    assert {
        "compare.json",
        "compare.csv",
        "requests.jsonl",
        "latency_vs_concurrency.png",
        "speedup_vs_concurrency.png",
        "acceptance_per_position.png",
    } <= names
    text = render(ab)
    assert "acceptance per draft position, in-process replay" in text
    print(text)


def test_killed_deployment_gives_partial_report(deploy_fn, tmp_path):
    from toolkit.bench.targets import deployed_address

    with deploy_fn("tiny-draft-target") as deployment:
        url, model = deployed_address(deployment, "grpc")
        pgid = _server_group(url)
        if pgid is None:
            pytest.skip(f"cannot find the tritonserver process behind {url} in /proc")
        killer = threading.Timer(3.0, lambda: os.killpg(pgid, signal.SIGKILL))
        killer.start()
        t = time.monotonic()
        try:
            with pytest.raises(BenchAborted) as e:
                bench(
                    url,
                    model=model,
                    workload="code",
                    max_tokens=48,
                    concurrency=[1, 2],
                    requests=64,
                    warmup=0,
                    timeout=60,
                    report_dir=tmp_path / "reports",
                    progress=False,
                )
        finally:
            killer.cancel()
        assert time.monotonic() - t < 60
    assert e.value.partial is not None and e.value.partial.partial
    assert (tmp_path / "reports" / "bench.json").is_file()
