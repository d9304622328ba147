#!/usr/bin/env python
"""The served-model fault probes of `scripts/bench.py run stress_served --faults`, one deployment each:

- the `tensorrt_llm` stub's address space limited to its size + 1 MiB (`prlimit --as`), then a
  1000-token stream and 4 short streams through `tensorrt_llm_bls`, `--tries` times: does
  tritonserver survive, do the failing requests get an error, is the next request served;
- SDTK_FAULT_INJECT (a thread that cannot start, a response that cannot be allocated) under 5
  concurrent streams: do exactly those requests fail, with an error event;
- the `tensorrt_llm` stub SIGKILLed after a stream's first chunk, read by `sdtk bench`'s load
  generator: is the request counted as failed.

Rows as stress_served.py's fault table has them (fault, expected, observed, detect_s, recover_s).

    .venv/bin/python scripts/benchmarks/_served_probes.py tiny-baseline     # print the rows only
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
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
BLS = "tensorrt_llm_bls"
SHORT = {"text_input": "def fib(n):", "max_tokens": 48, "stream": True}
LONG = {"text_input": "import os\n", "max_tokens": 1000, "stream": True, "end_id": -1}  # no early end


def _stream(url: str, body: dict, out: list) -> None:
    """One generate_stream: (max_tokens, events, error or None, seconds)."""
    import httpx

    t0, events, error = time.monotonic(), 0, None
    try:
        with httpx.Client(timeout=60) as c, c.stream("POST", url, json=body) as r:
            if r.status_code != 200:
                r.read()
                error = f"HTTP {r.status_code}: {r.text[:200]}"
            for line in r.iter_lines():
                if line.startswith("data:"):
                    event = json.loads(line[5:])
                    if "error" in event:
                        error = event["error"]
                    else:
                        events += 1
    except Exception as e:  # noqa: BLE001 - a cut connection is a result too
        error = repr(e)
    out.append((body["max_tokens"], events, error, time.monotonic() - t0))


def _concurrently(url: str, bodies: list[dict], stagger: float = 0.0) -> list:
    out: list = []
    threads = [threading.Thread(target=_stream, args=(url, b, out)) for b in bodies]
    for t in threads:
        t.start()
        time.sleep(stagger)
    for t in threads:
        t.join(timeout=180)
    return out


@contextlib.contextmanager
def _deployed(name: str, workdir: Path, env: dict[str, str] | None = None) -> Iterator:
    """A detached deployment of `name` on free ports, whose server inherits `env`; stopped after."""
    sys.path.insert(0, str(ROOT / "tests"))
    from triton_support import live_deployment

    from toolkit.recipe import load_recipe

    saved = {k: os.environ.get(k) for k in env or {}}
    os.environ.update(env or {})
    try:
        with live_deployment(load_recipe(str(ROOT / "recipes" / f"{name}.yaml")), workdir) as dep:
            yield dep
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def address_space(name: str, workdir: Path, tries: int = 5) -> dict:
    from toolkit.server import procs
    from toolkit.server.state import python_stubs

    crashed = served = long_done = 0
    short_errors: list[str] = []
    long_errors: list[str] = []
    after_errors: list[str] = []
    detect: list[float] = []
    with _deployed(name, workdir) as dep:
        url = f"{dep.http_url}/v2/models/{BLS}/generate_stream"
        for _ in range(tries):
            stub = python_stubs(dep.pid)["tensorrt_llm"][0]
            with open(f"/proc/{stub}/status") as f:
                vm = int(next(x.split()[1] for x in f if x.startswith("VmSize:"))) * 1024
            limit = vm + (1 << 20)
            subprocess.run(["prlimit", f"--pid={stub}", f"--as={limit}:{limit}"], check=True)
            out = _concurrently(url, [LONG, SHORT, SHORT, SHORT, SHORT], stagger=0.1)
            if not procs.alive(dep.pid):
                crashed += 1
                break
            # Lifting a hard limit needs CAP_SYS_RESOURCE; without it the next try limits again.
            subprocess.run(["prlimit", f"--pid={stub}", "--as=unlimited:unlimited"], capture_output=True)
            long_done += any(mt == 1000 and err is None and n == 1000 for mt, n, err, _ in out)
            long_errors += [err for mt, _, err, _ in out if mt == 1000 and err]
            short_errors += [err for mt, _, err, _ in out if mt != 1000 and err]
            detect += [s for mt, _, err, s in out if mt != 1000 and err]
            after: list = []
            _stream(url, SHORT, after)
            served += after[0][2] is None
            after_errors += [after[0][2]] if after[0][2] else []

        # The limit cannot be lifted without CAP_SYS_RESOURCE: a fresh stub (`sdtk restart`) has none.
        recover = None
        if not crashed:
            t0 = time.monotonic()
            argv = [
                sys.executable,
                "-m",
                "toolkit.cli",
                "restart",
                "tensorrt_llm",
                "--workdir",
                str(dep.workdir),
            ]
            subprocess.run(argv, capture_output=True, timeout=300, cwd=ROOT)
            again: list = []
            _stream(url, SHORT, again)
            if again[0][2] is None:
                recover = round(time.monotonic() - t0, 1)

    def kinds(errors: list[str]) -> str:
        words = ("can't start new thread", "cannot allocate", "MemoryError", "is down")
        return "; ".join(sorted({next((w for w in words if w in e), e[:80]) for e in errors})) or "none"

    return dict(
        fault=f"`tensorrt_llm` stub limited to its address space + 1 MiB (`prlimit --as`); a 1000-token "
        f"stream and 4 short ones through the BLS, {tries} tries",
        expected="no tritonserver crash; failing requests get an error; the rest are served",
        observed=f"tritonserver crashed in {crashed} of {tries} tries; {len(short_errors)} of {4 * tries} "
        f"short streams ended with an error event ({kinds(short_errors)}); the long stream "
        f"completed in {long_done} of {tries} (errors: {kinds(long_errors)}); the next request, "
        f"still limited, was served in {served} of {tries} (errors: {kinds(after_errors)}); after "
        + (
            "`sdtk restart tensorrt_llm` a request was served"
            if recover
            else "the restart nothing was served"
        ),
        detect_s=round(sum(detect) / len(detect), 2) if detect else None,
        recover_s=recover,
    )


def injected(name: str, workdir: Path) -> dict:
    from toolkit.server import procs

    env = {"SDTK_FAULT_INJECT": "thread_start:2,alloc:8"}
    with _deployed(name, workdir, env) as dep:
        url = f"{dep.http_url}/v2/models/{BLS}/generate_stream"
        out = _concurrently(url, [SHORT] * 5)
        after: list = []
        _stream(url, SHORT, after)
        alive = procs.alive(dep.pid)
    errors = [err for _, _, err, _ in out if err]
    named = sum(
        any(w in e for w in ("can't start new thread", "cannot allocate the response")) for e in errors
    )
    return dict(
        fault="SDTK_FAULT_INJECT: the 2nd request's thread and the 8th response's allocation fail; 5 streams",
        expected="those 2 requests end with an error event, 3 complete, the server serves on",
        observed=f"{len(errors)} of 5 ended with an error event ({named} naming the fault), "
        f"{5 - len(errors)} complete; tritonserver alive: {alive}; the next request "
        + ("served" if after[0][2] is None else f"failed: {after[0][2][:80]}"),
        detect_s=round(max((s for _, _, e, s in out if e), default=0), 2) or None,
        recover_s=None,
    )


def bench_cut(name: str, workdir: Path) -> dict:
    from toolkit.bench.measure.loadgen import Sampling, TritonEndpoint, run_request
    from toolkit.bench.measure.workloads import Prompt
    from toolkit.server.state import python_stubs

    with _deployed(name, workdir) as dep:
        stub = python_stubs(dep.pid)["tensorrt_llm"][0]

        class KillAtFirstChunk:
            def __init__(self, endpoint):
                self.endpoint, self.name, self.streams = endpoint, endpoint.name, True
                self.killed = 0.0

            async def stream(self, prompt, **kw):
                async for chunk in self.endpoint.stream(prompt, **kw):
                    yield chunk
                    if not self.killed:
                        os.kill(stub, signal.SIGKILL)
                        self.killed = time.monotonic()

        async def main():
            endpoint = TritonEndpoint(dep.http_url, model=BLS, protocol="http", timeout=60)
            await endpoint.check()
            try:
                killer = KillAtFirstChunk(endpoint)
                rec = await run_request(
                    killer,
                    0,
                    Prompt(LONG["text_input"], "code", 1000),
                    seed=0,
                    sampling=Sampling(),
                    timeout=90,
                )
                return rec, time.monotonic() - killer.killed
            finally:
                await endpoint.close()

        rec, ended = asyncio.run(main())
    return dict(
        fault="`tensorrt_llm` stub SIGKILLed after a BLS stream's first chunk, read by `sdtk bench`",
        expected="bench counts the request as failed (an error event, not a short success)",
        observed=f"failed: {rec.error_kind}: {(rec.error or 'none')[:120]}, after {len(rec.chunk_times)} chunk(s)",
        detect_s=round(ended, 2),
        recover_s=None,
    )


PROBES = (address_space, injected, bench_cut)


def run(name: str, workdir: Path) -> list[dict]:
    """Every probe on its own deployment of `name` under `workdir`; one row each. Only recipes
    whose entry is the reference backend's decoupled BLS (streams through `tensorrt_llm_bls`)."""
    from toolkit.recipe import load_recipe

    recipe = load_recipe(str(ROOT / "recipes" / f"{name}.yaml"))
    if recipe.backend != "reference" or not recipe.serving.decoupled or recipe.serving.repository == "llmapi":
        return []
    rows = []
    for i, probe in enumerate(PROBES):
        rows.append(probe(name, workdir / f"{i}-{probe.__name__}"))
        print(json.dumps(rows[-1]), flush=True)
    return rows


if __name__ == "__main__":
    import tempfile

    os.environ.setdefault("SDTK_EXIT_TIMEOUT_S", "3")
    with tempfile.TemporaryDirectory(prefix="sdtk-served-probes-") as tmp:
        for recipe in sys.argv[1:] or ["tiny-baseline"]:
            run(recipe, Path(tmp) / recipe)
