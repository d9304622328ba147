"""A request whose thread or memory runs out fails alone, on the real Triton.

The reference `tensorrt_llm` model is made to fail through its test seam, SDTK_FAULT_INJECT
(toolkit/serving/triton.py `Faults`, rendered as sdtk_serving/triton.py), set in the environment the server and
its stubs inherit: the 2nd request's thread does not start (as `RuntimeError: can't start new
thread` under an address-space limit, which made tritonserver 2.51 segfault in
TRITONBACKEND_ResponseFactoryIsCancelled), and the 8th response cannot be allocated
(MemoryError); through sdtk's BLS the latter comes back in-band (st.fault_chunk).
Five concurrent BLS streams: exactly those two requests end with an error event
naming the fault, the others complete with the text they give alone, and the server (same pid,
same stubs) serves on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from triton_support import live_deployment

from tests.stress.conftest import RECIPES, diagnosis
from toolkit.recipe import load_recipe
from toolkit.server import procs
from toolkit.server.state import python_stubs

pytestmark = [pytest.mark.tritonserver, pytest.mark.slow]
STREAMS = 5
BODY = {"text_input": "def fib(n):", "max_tokens": 48, "stream": True}


@pytest.fixture(scope="module")
def faulty(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:  # the server and its stubs inherit it
        mp.setenv("SDTK_FAULT_INJECT", "thread_start:2,alloc:8")
        cm = live_deployment(
            load_recipe(str(RECIPES / "tiny-baseline.yaml")), tmp_path_factory.mktemp("faulty")
        )
        result = cm.__enter__()
    try:
        yield result
    finally:
        cm.__exit__(None, None, None)


def stream(url: str, out: list) -> None:
    """One generate_stream request: its text, and its error event or exception (None: complete)."""
    text, error = "", None
    try:
        with httpx.Client(timeout=60) as c, c.stream("POST", url, json=BODY) as r:
            for line in r.iter_lines():
                if line.startswith("data:"):
                    event = json.loads(line[5:])
                    if "error" in event:
                        error = event["error"]
                    else:
                        text += event.get("text_output", "")
    except Exception as e:  # noqa: BLE001 - recorded: a cut connection is a failure too
        error = repr(e)
    out.append((text, error))


def test_failed_thread_and_allocation_fail_their_requests_alone(faulty):
    model = "tensorrt_llm_bls"
    url = f"{faulty.http_url}/v2/models/{model}/generate_stream"
    stubs = python_stubs(faulty.pid)
    results: list = []
    clients = [threading.Thread(target=stream, args=(url, results)) for _ in range(STREAMS)]
    for c in clients:
        c.start()
    for c in clients:
        c.join(timeout=120)
    assert len(results) == STREAMS, diagnosis(faulty)
    errors = sorted(e for _, e in results if e is not None)
    assert len(errors) == 2, (errors, diagnosis(faulty))
    assert any("can't start new thread" in e for e in errors), errors
    assert any("cannot allocate the response" in e for e in errors), errors
    assert all("out of memory or threads" in e for e in errors), errors
    # the server serves on: same process, same stubs, and the complete streams gave the full text
    alone: list = []
    stream(url, alone)
    assert alone[0][1] is None, alone
    complete = [t for t, e in results if e is None]
    assert complete == [alone[0][0]] * (STREAMS - 2)
    assert procs.alive(faulty.pid) and python_stubs(faulty.pid) == stubs, diagnosis(faulty)
    r = httpx.post(
        f"{faulty.http_url}/v2/models/{model}/generate", json={**BODY, "stream": False}, timeout=120
    )
    # not streamed, the text starts with the prompt (exclude_input_in_output defaults to false,
    # as upstream's BLS); streamed chunks carry only the new text
    assert r.status_code == 200 and r.json()["text_output"] == BODY["text_input"] + alone[0][0], r.text


class KillAtFirstChunk:
    """bench's HTTP endpoint, which SIGKILLs a stub once the first chunk has arrived."""

    def __init__(self, endpoint, pid: int):
        self.endpoint, self.pid = endpoint, pid
        self.name, self.streams = endpoint.name, True

    async def stream(self, prompt, **kw):
        killed = False
        async for chunk in self.endpoint.stream(prompt, **kw):
            yield chunk
            if not killed:
                os.kill(self.pid, signal.SIGKILL)
                killed = True


def test_bench_counts_a_stream_cut_by_a_stub_death_as_failed(faulty):
    """Last in the module: it kills the tensorrt_llm stub. The BLS stream it held ends with an
    error event naming the dead model, and `sdtk bench`'s load generator records a failure."""
    from toolkit.bench.measure.loadgen import Sampling, TritonEndpoint, run_request
    from toolkit.bench.measure.workloads import Prompt

    stub = python_stubs(faulty.pid)["tensorrt_llm"][0]

    async def main():
        endpoint = TritonEndpoint(faulty.http_url, model="tensorrt_llm_bls", protocol="http", timeout=60)
        await endpoint.check()
        try:
            killer = KillAtFirstChunk(endpoint, stub)
            return await run_request(
                killer, 0, Prompt("import os\n", "code", 1000), seed=0, sampling=Sampling(), timeout=90
            )
        finally:
            await endpoint.close()

    rec = asyncio.run(main())
    assert rec.error_kind == "server" and "'tensorrt_llm' is down" in (rec.error or ""), (
        rec,
        diagnosis(faulty),
    )
    assert len(rec.chunk_times) >= 1 and rec.end is None


@contextlib.contextmanager
def small_disk(path: Path, size: str = "2M") -> Iterator[Path]:
    """`path`, a tmpfs of `size` (root only): deploy fills it."""
    path.mkdir()
    if (
        os.geteuid() != 0
        or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
        ).returncode
    ):
        pytest.skip("no right to mount a small file system here")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


def test_a_full_disk_at_deploy_names_the_path_and_the_space_left(tmp_path):
    with small_disk(tmp_path / "small") as small:
        r = subprocess.run(
            [sys.executable, "-m", "toolkit.cli", "deploy", str(RECIPES / "tiny-baseline.yaml"), "--workdir",
             str(small), "--detach", "--auto-ports", "--no-validate", "--on-failure", "none"],
            capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    assert r.returncode == 1, r.stderr
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    line = next(x for x in r.stderr.splitlines() if x.startswith("error:"))
    assert f"no space left on the device while writing {small}/tiny-baseline/" in line, line
    assert " free there now)" in line and ".incomplete" not in line, line
    assert "free space on that file system, or pass another --workdir" in r.stderr
