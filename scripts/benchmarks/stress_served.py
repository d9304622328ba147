#!/usr/bin/env python
"""Long stress run of every tiny recipe served on the embedded Triton (the CI-sized version is
tests/stress/), with its results written into docs/benchmarks.md.

Per recipe: deploy (detached, free ports), warm up, then `--requests` mixed requests
(toolkit.stress.KINDS) in rounds at concurrency 1, 2, 4 and 8; then check
- zero failed well-formed requests, malformed ones refused with a 4xx;
- zero stub deaths (pids from /proc before and after) and no stub segfault in the kernel log
  during the run or the stop (when `dmesg` is readable);
- every completed greedy text equal to the in-process reference runtime (speculation off);
- server RSS (tritonserver + stubs) after the run within 10% of after warm-up;
- cancellation: a short request's latency after 6 abandoned 1000-token streams against the
  latency on the idle server (BLS entries, and the `tensorrt_llm` model direct for ensembles).

    .venv/bin/python scripts/bench.py run stress_served                      # all tiny recipes, 300 each
    .venv/bin/python scripts/bench.py run stress_served --recipes tiny-draft-target --requests 60 --no-write
    .venv/bin/python scripts/bench.py run stress_served --bls-repro naive    # the upstream crash, reproduced
    .venv/bin/python scripts/bench.py run stress_served --faults --recipes tiny-draft-target tiny-eagle3

`--faults` breaks one deployment per recipe on purpose (a killed stub, a read-only workdir, ...) and prints a table: fault,
expected, observed, time to detect, time to recover (written into docs/benchmarks.md too); the
served models' own probes (an address-space limit, injected thread and allocation failures, a
stream cut by a stub death as `sdtk bench` counts it) come from scripts/benchmarks/_served_probes.py, and the
watchdog's own (a frozen stub, a crash loop, a damaged record, a port held and a full disk during
a restart; once, on tiny-baseline, with a pass/FAIL verdict each) from scripts/benchmarks/_watchdog_probes.py.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import _harness  # noqa: E402
from benchmarks import _served_probes as served_probes  # noqa: E402 - the served models' own faults
from benchmarks import _watchdog_probes as watchdog_probes  # noqa: E402 - the watchdog's faults
from toolkit import stress  # noqa: E402

RECIPES = (
    "tiny-baseline",
    "tiny-draft-target",
    "tiny-eagle3",
    "tiny-medusa",
    "tiny-lookahead",
    "tiny-ngram",
    "tiny-eagle3-llmapi",
    "tiny-ngram-llmapi",
)
LEVELS = (1, 2, 4, 8)
MARK, MARK_END = "<!-- stress_served:start -->", "<!-- stress_served:end -->"
FAULTS_MARK, FAULTS_END = "<!-- stress_served_faults:start -->", "<!-- stress_served_faults:end -->"


def segfaults(pids: set[int]) -> list[str]:
    """Kernel-log segfault lines of these pids (empty when dmesg cannot be read)."""
    try:
        out = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line for line in out.splitlines() if "segfault" in line and any(f"[{p}]" in line for p in pids)]


def short_latency(traffic: stress.Traffic) -> float:
    out = traffic.send("http", "def f(x):", 16)
    assert out.ok, out.error
    return out.seconds


def cancellation(result, traffic: stress.Traffic) -> dict:
    """Short-request latency, idle and after 6 abandoned long streams (median of 3 each)."""
    import numpy as np
    import tritonclient.grpc as grpcclient

    idle = statistics.median(short_latency(traffic) for _ in range(3))
    after = []
    for _ in range(3):
        if result.entry_kind in ("bls", "llmapi"):  # the entry model itself sees the cancellation
            threads = [
                threading.Thread(target=traffic.send, args=("abandon", "import os\n", 1000)) for _ in range(3)
            ]
            threads += [
                threading.Thread(target=traffic.send, args=("cancel", "import os\n", 1000)) for _ in range(3)
            ]
            [t.start() for t in threads]
            [t.join() for t in threads]
        else:  # through an ensemble Triton 2.51 cannot cancel a running step: call tensorrt_llm
            for _ in range(6):
                client = grpcclient.InferenceServerClient(result.grpc_url)
                got = threading.Event()
                client.start_stream(callback=lambda result, error, got=got: got.set())
                inputs = []
                for name, value in (
                    ("input_ids", np.array([[1, 2, 3, 4, 5, 6, 7, 8]], np.int32)),
                    ("input_lengths", np.array([[8]], np.int32)),
                    ("request_output_len", np.array([[1000]], np.int32)),
                    ("end_id", np.array([[-1]], np.int32)),
                    ("streaming", np.array([[True]])),
                ):
                    t = grpcclient.InferInput(
                        name, list(value.shape), "BOOL" if value.dtype == bool else "INT32"
                    )
                    t.set_data_from_numpy(value)
                    inputs.append(t)
                client.async_stream_infer("tensorrt_llm", inputs)
                got.wait(60)
                client.stop_stream(cancel_requests=True)
                client.close()
        after.append(short_latency(traffic))
    a = statistics.median(after)
    return {"idle_ms": round(idle * 1000, 1), "after_ms": round(a * 1000, 1), "ratio": round(a / idle, 2)}


def run_recipe(name: str, n: int, workdir: Path) -> dict:
    from toolkit.deploy import DeployOptions, deploy
    from toolkit.recipe import load_recipe
    from toolkit.server.state import stop_server

    recipe = load_recipe(str(ROOT / "recipes" / f"{name}.yaml"))
    result = deploy(
        recipe,
        DeployOptions(workdir=workdir, detach=True, auto_ports=True, validate=False),
        progress=lambda m: None,
    )
    traffic = stress.Traffic(
        result.http_url,
        result.grpc_url,
        result.model,
        llmapi=result.entry_kind == "llmapi",
    )
    try:
        stress.run(traffic, stress.plan(30, seed=99), concurrency=4)  # warm-up
        reports = []
        for i, level in enumerate(LEVELS):
            rep = stress.run(
                traffic, stress.plan(max(1, n // len(LEVELS)), seed=i), concurrency=level, pgid=result.pid
            )
            reports.append(rep)
            print(f"  {name} c={level}: {json.dumps(rep.summary())[:300]}", file=sys.stderr)
        outcomes = [o for rep in reports for o in rep.outcomes]
        want = stress.baseline_texts(recipe, [(o.kind, o.prompt, o.max_tokens) for o in outcomes])
        before = {p for ps in reports[0].stubs_before.values() for p in ps}
        after = {p for ps in reports[-1].stubs_after.values() for p in ps}
        r = {
            "recipe": name,
            "entry": result.model,
            "requests": len(outcomes),
            "failed": sum(not o.ok for o in outcomes),
            "bad_refused": sum(o.kind == "bad" and o.ok for o in outcomes),
            "checked_outputs": sum(o.ok and o.kind in stress.COMPLETE_KINDS for o in outcomes),
            "wrong_outputs": sum(len(stress.mismatches(rep, want)) for rep in reports),
            "stub_deaths": len(before - after),
            "rss_warm_mb": reports[0].rss_before_mb,
            "rss_end_mb": reports[-1].rss_after_mb,
            "cancel": cancellation(result, traffic),
            "seconds": round(sum(rep.seconds for rep in reports), 1),
        }
    finally:
        stop_server(result.workdir)
    time.sleep(1)  # the kernel log lags a little
    r["segfaults"] = len(segfaults(before | after))
    return r


def bls_repro(variant: str, requests: int) -> dict:
    """The minimal BLS of tests/stress/bls_repro, `naive` (crashes on Triton 2.51) or `fixed`."""
    import httpx

    from toolkit.server.launch import TritonServer
    from toolkit.server.state import python_stubs

    tmp = Path(tempfile.mkdtemp(prefix="sdtk-bls-repro-"))
    repo = tmp / "repo"
    shutil.copytree(ROOT / "tests" / "stress" / "bls_repro", repo)
    cfg = repo / "bls" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace('"fixed"', f'"{variant}"'))
    failures = []
    with TritonServer(repo, workdir=tmp / "wd", model_name="bls", auto_ports=True) as server:
        before = python_stubs(server.pid)

        def client(k: int) -> None:
            with httpx.Client(timeout=120) as c:
                for _ in range(k):
                    r = c.post(f"{server.http_url}/v2/models/bls/generate", json={"N": [200]})
                    if r.status_code != 200:
                        failures.append(r.text[:120])

        threads = [threading.Thread(target=client, args=(requests // 3,)) for _ in range(3)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        after = python_stubs(server.pid)
        crash = [line for line in server.logs(None).splitlines() if "malloc" in line or "corrupt" in line]
    return {
        "variant": variant,
        "requests": requests,
        "failed": len(failures),
        "stubs_same": before == after,
        "log": crash[:2],
    }


def write(results: list[dict], argv: list[str]) -> None:
    rows = [
        "| recipe | entry | requests | failed | 4xx for malformed | outputs checked / wrong | stub deaths | stub segfaults (run + stop) | RSS after warm-up → end (MiB) | short request idle → after 6 abandoned (ms) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        c = r["cancel"]
        rows.append(
            f"| {r['recipe']} | {r['entry']} | {r['requests']} | {r['failed']} | {r['bad_refused']} | "
            f"{r['checked_outputs']} / {r['wrong_outputs']} | {r['stub_deaths']} | {r['segfaults']} | "
            f"{r['rss_warm_mb']} → {r['rss_end_mb']} ({(r['rss_end_mb'] / r['rss_warm_mb'] - 1) * 100:+.1f}%) | "
            f"{c['idle_ms']} → {c['after_ms']} ({c['ratio']}×) |"
        )
    section = "\n".join(
        [
            MARK,
            "## Served stress (`scripts/bench.py run stress_served`)",
            "",
            "Mixed traffic per recipe (HTTP generate / generate_stream, gRPC streaming, abandoned HTTP streams, "
            "cancelled gRPC streams, malformed requests) in rounds at concurrency 1, 2, 4 and 8. Outputs are "
            "compared with the in-process reference runtime; stub pids are read from /proc. The last column is "
            "the median of 3: the BLS entry sees the cancellations; for ensemble entries the long requests go to "
            "`tensorrt_llm` directly (Triton 2.51's ensemble does not cancel a running step).",
            "",
            *rows,
            MARK_END,
        ]
    )
    _harness.write_section(ROOT / "docs" / "benchmarks.md", MARK, MARK_END, section)


def _sdtk(*args: str, timeout: float = 600) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "toolkit.cli", *args],
        capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, cwd=ROOT,
    )  # fmt: skip
    return r, time.monotonic() - t0


def _line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0][:110].replace("|", "\\|")


def _stream_until_error(url: str, body: dict, first: threading.Event, out: dict, timeout: float) -> None:
    import httpx

    try:
        with httpx.Client(timeout=timeout) as c, c.stream("POST", url, json=body) as r:
            for line in r.iter_lines():
                if line.startswith("data:"):
                    first.set()
                    if '"error"' in line:
                        out["error"] = line[5:].strip()
    except Exception as e:  # a hang ends as the client's timeout
        timed_out = isinstance(e, httpx.TimeoutException)
        out["error"] = type(e).__name__ + (f" (client timeout {timeout:.0f}s)" if timed_out else "")
    out["end"] = time.monotonic()
    first.set()


def _post_until_error(url: str, body: dict, first: threading.Event, out: dict, timeout: float) -> None:
    import httpx

    first.set()
    try:
        r = httpx.post(url, json=body, timeout=timeout)
        if r.status_code != 200:
            out["error"] = f"HTTP {r.status_code}: {r.text}"
    except Exception as e:  # a hang ends as the client's timeout
        timed_out = isinstance(e, httpx.TimeoutException)
        out["error"] = type(e).__name__ + (f" (client timeout {timeout:.0f}s)" if timed_out else "")
    out["end"] = time.monotonic()


def _post_form_encoded(url: str, body: str) -> str:
    """POST `body` as curl does by default (form-encoded): 'HTTP <code>' or the client's error."""
    import httpx

    try:
        r = httpx.post(
            url, content=body, timeout=30, headers={"Content-Type": "application/x-www-form-urlencoded"}
        )
        return f"HTTP {r.status_code}"
    except httpx.HTTPError as e:
        return type(e).__name__


def _long_request(url: str, repo: Path, model: str) -> tuple[threading.Thread, dict]:
    """A 1000-token request to `model` (streamed where it is decoupled), running: returned once
    its first chunk came (or, whole requests, 1 s in). `out` gets its error and end time."""
    first, out = threading.Event(), {}
    body = {"text_input": "import os\n", "max_tokens": 1000}
    if model == "tensorrt_llm_bls":
        body["num_draft_tokens"] = 0  # one long sub-request: a kill lands inside it
    decoupled = "decoupled: true" in (repo / model / "config.pbtxt").read_text()
    if decoupled:
        args = (f"{url}/v2/models/{model}/generate_stream", {**body, "stream": True}, first, out, 15.0)
        t = threading.Thread(target=_stream_until_error, args=args)
    else:
        args = (f"{url}/v2/models/{model}/generate", body, first, out, 15.0)
        t = threading.Thread(target=_post_until_error, args=args)
    t.start()
    first.wait(120)
    if not decoupled:
        time.sleep(1.0)  # well into its 1000 tokens
    return t, out


def run_faults(name: str, workdir: Path) -> list[dict]:
    """Break one deployment of `name` in every way `_run_faults` knows; one row per fault. The deployment
    is stopped whatever happens."""
    try:
        return _run_faults(name, workdir)
    finally:
        _sdtk("stop", "--workdir", str(workdir / name), "--grace", "1")


def _run_faults(name: str, workdir: Path) -> list[dict]:
    import os
    import signal

    import httpx

    from toolkit.server.state import python_stubs

    rows: list[dict] = []
    recipe = str(ROOT / "recipes" / f"{name}.yaml")
    dep = workdir / name
    # First without a watchdog (faults are seen, and repaired, by hand), then with the default one.
    deploy = ["deploy", recipe, "--workdir", str(workdir), "--detach", "--auto-ports", "--no-validate",
              "--on-failure", "none"]  # fmt: skip

    def row(fault: str, expected: str, observed: str, detect: float | None, recover: float | None) -> None:
        rows.append(
            dict(fault=fault, expected=expected, observed=observed, detect_s=detect, recover_s=recover)
        )
        print(json.dumps(rows[-1]), flush=True)

    # Two racing deploys into one workdir.
    t0 = time.monotonic()
    racers = [
        subprocess.Popen([sys.executable, "-m", "toolkit.cli", *deploy], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL, cwd=ROOT)
        for _ in range(2)
    ]  # fmt: skip
    ended: dict[int, float] = {}
    while len(ended) < len(racers) and time.monotonic() - t0 < 600:
        for i, p in enumerate(racers):
            if i not in ended and p.poll() is not None:
                ended[i] = time.monotonic() - t0
        time.sleep(0.05)
    outs = [(p.wait(), p.communicate()[1], ended.get(i, 600.0)) for i, p in enumerate(racers)]
    loser = [o for o in outs if o[0]]
    row("two `sdtk deploy` racing into one workdir", "one wins; the other refused, naming the holder",
        f"exit codes {sorted(o[0] for o in outs)}; loser: {_line(loser[0][1]) if loser else '-'}",
        round(min(o[2] for o in loser), 1) if loser else None, None)  # fmt: skip
    st = json.loads((dep / "state.json").read_text())
    url, model = st["http_url"], st["model_name"]

    def greedy(m: str) -> str:
        r = httpx.post(
            f"{url}/v2/models/{m}/generate", json={"text_input": "def f(x):", "max_tokens": 16}, timeout=120
        )
        return r.json().get("text_output", r.text)

    repo = dep / "triton_repo"
    entries = sorted({model} | {m for m in ("ensemble", "tensorrt_llm_bls") if (repo / m).is_dir()})
    before = {m: greedy(m) for m in entries}

    r, secs = _sdtk(*deploy)
    row(
        "second `sdtk deploy` into the live workdir",
        "refused before touching it",
        _line(r.stderr),
        round(secs, 1),
        None,
    )

    r = httpx.post(f"{url}/v2/repository/models/tensorrt_llm/unload", json={}, timeout=30)
    row(
        "unkeyed `POST /v2/repository/models/tensorrt_llm/unload`",
        "refused (403)",
        f"HTTP {r.status_code}: {_line(r.text)}",
        None,
        None,
    )

    # The tensorrt_llm stub killed while a request of each entry is in flight (streamed where
    # the entry is decoupled: killed at its first chunk), then brought back by `sdtk restart`.
    for m in entries:
        t, out = _long_request(url, repo, m)
        kill = time.monotonic()
        os.kill(python_stubs(st["pgid"])["tensorrt_llm"][0], signal.SIGKILL)
        t.join()
        row(f"`tensorrt_llm` stub killed mid-request ({m})", "an error naming the model within 5 s",
            _line(out.get("error", "ended without an error")), round(out["end"] - kill, 1), None)  # fmt: skip
        r, secs = _sdtk("status", "--workdir", str(dep))
        row("`sdtk status` after the kill", "exit 1, names the dead model",
            f"exit {r.returncode}: {_line(r.stdout)}", round(secs, 1), None)  # fmt: skip
        r, secs = _sdtk("restart", "tensorrt_llm", "--workdir", str(dep))
        after = {e: greedy(e) for e in entries}
        same = "identical" if after == before else f"DIFFERENT: {after} vs {before}"
        row("`sdtk restart tensorrt_llm`", "serves again, same greedy outputs",
            f"exit {r.returncode}; outputs {same}", None, round(secs, 1))  # fmt: skip

    # Finding 1: one large form-encoded body (upstream crash of the HTTP frontend).
    big = json.dumps({"text_input": "y" * 5_000_000, "max_tokens": 4})
    answer = _post_form_encoded(f"{url}/v2/models/{model}/generate", big)
    time.sleep(1.0)
    r, secs = _sdtk("status", "--workdir", str(dep))
    row("5 MB form-encoded POST (curl's default content type)", "upstream: server#5840 crash; keep it away from Triton",
        f"client: {answer}; status: {_line(r.stdout)}", round(secs, 1), None)  # fmt: skip
    _sdtk("stop", "--workdir", str(dep), "--grace", "1")

    # The same faults under the watchdog of a default `sdtk deploy --detach` (--on-failure restart).
    r, _ = _sdtk(*deploy[:-2])
    st = json.loads((dep / "state.json").read_text())
    url = st["http_url"]

    def restarted(n: int, t0: float) -> float:
        while time.monotonic() - t0 < 300:
            with contextlib.suppress(OSError, ValueError):
                now = json.loads((dep / "state.json").read_text())
                if now["restarts"] >= n and now["status"] == "ready" and now["stubs"]:
                    return time.monotonic() - t0
            time.sleep(0.1)
        return float("nan")

    for n, m in enumerate(entries, start=1):
        t, out = _long_request(url, repo, m)
        st = json.loads((dep / "state.json").read_text())
        kill = time.monotonic()
        os.kill(python_stubs(st["pgid"])["tensorrt_llm"][0], signal.SIGKILL)
        t.join()
        back = restarted(n, kill)
        after = {e: greedy(e) for e in entries}
        same = "identical" if after == before else f"DIFFERENT: {after} vs {before}"
        row(f"`tensorrt_llm` stub killed mid-request ({m}), with the watchdog",
            "an error within 5 s; the server restarted, same greedy outputs",
            f"{_line(out.get('error', 'ended without an error'))}; outputs {same}",
            round(out["end"] - kill, 1), round(back, 1))  # fmt: skip
    t0 = time.monotonic()
    answer = _post_form_encoded(f"{url}/v2/models/{model}/generate", big)
    detect = time.monotonic() - t0
    back = restarted(len(entries) + 1, t0)
    after = {e: greedy(e) for e in entries}
    r, _ = _sdtk("status", "--workdir", str(dep), "--json")
    last = (json.loads(r.stdout).get("failures") or ["none recorded"])[-1]
    same = "identical" if after == before else "DIFFERENT"
    row("5 MB form-encoded POST, with the watchdog", "the server restarted; the crash recorded for status",
        f"client: {answer}; outputs {same}; status: {_line(last)}", round(detect, 1), round(back, 1))  # fmt: skip
    _sdtk("stop", "--workdir", str(dep), "--grace", "1")

    # Workdirs that cannot work.
    spaced = workdir / "with space"
    r, secs = _sdtk(*deploy[:3], str(spaced), *deploy[4:])
    row(
        "workdir with a space",
        "refused before launch, naming the cause",
        _line(r.stderr),
        round(secs, 1),
        None,
    )
    return rows


def load_average() -> str:
    """The 1/5/15-minute load averages, as `uptime` shows them."""
    return ", ".join(f"{x:.2f}" for x in __import__("os").getloadavg())


def write_faults(results: dict[str, list[dict]], argv: list[str], loads: tuple[str, str]) -> None:
    lines = [
        FAULTS_MARK,
        "## Faults on a served deployment (`scripts/bench.py run stress_served --faults`)",
        "",
        f"Machine: {platform.machine()}, {len(__import__('os').sched_getaffinity(0))} cores; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average (1, 5, 15 min) {loads[0]} at the "
        f"start, {loads[1]} at the end. Command: `{' '.join(['python', 'scripts/bench.py run stress_served', *argv])}`. "
        "Streams are read with a 15 s client timeout. Rows before the second deploy run without a "
        "watchdog (`--on-failure none`): there the `ensemble` row is Triton 2.51's limit, not sdtk's: an "
        "ensemble request in flight when its stub dies is never answered (docs/runbooks/troubleshooting.md), "
        'while the BLS entry ends with an error. Rows "with the watchdog" are a default `sdtk deploy '
        "--detach` (`--on-failure restart`): it kills and relaunches the server, which ends every held "
        "request. Detect: when the client's request ended (racing deploys: when the loser exited); "
        "recover: from the fault until the restarted server was READY. The watchdog's probes "
        "(scripts/benchmarks/_watchdog_probes.py, each on its own detached tiny-baseline) carry a verdict against the "
        'numbers of their "Done when"; there detect is when `sdtk status` first said what failed and '
        "recover is until the server was READY again (from the freeze, or from freeing the port or the disk).",
    ]
    for name, rows in results.items():
        lines += [
            "",
            f"**{name}**",
            "",
            "| fault | expected | observed | detect (s) | recover (s) | Done when |",
            "|---|---|---|---:|---:|---|",
        ]
        for r in rows:
            lines.append(
                f"| {r['fault']} | {r['expected']} | {r['observed']} | "
                f"{'' if r['detect_s'] is None else r['detect_s']} | {'' if r['recover_s'] is None else r['recover_s']} | "
                f"{r.get('verdict', '')} |"
            )
    lines.append(FAULTS_END)
    # observed text may quote a process's command line: paths under the repository relative to it
    section = "\n".join(lines).replace(str(ROOT) + "/", "")
    _harness.write_section(ROOT / "docs" / "benchmarks.md", FAULTS_MARK, FAULTS_END, section)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recipes", nargs="+", default=list(RECIPES))
    ap.add_argument("--requests", type=int, default=300, help="per recipe")
    ap.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    ap.add_argument("--bls-repro", choices=("naive", "fixed"), help="run the minimal BLS reproduction only")
    ap.add_argument(
        "--faults", action="store_true", help="break a deployment per recipe on purpose (fault table)"
    )
    args = ap.parse_args(argv)
    if args.bls_repro:
        print(json.dumps(bls_repro(args.bls_repro, 60)))
        return
    if args.faults:
        loads = [load_average()]
        with tempfile.TemporaryDirectory(prefix="sdtk-faults-") as tmp:
            # the deployment's faults above, then the served models' own (scripts/benchmarks/_served_probes.py)
            faults = {
                name: run_faults(name, Path(tmp) / name)
                + served_probes.run(name, Path(tmp) / f"{name}-served")
                for name in args.recipes
            }
            # the watchdog's own, once (scripts/benchmarks/_watchdog_probes.py)
            faults["tiny-baseline: the watchdog"] = watchdog_probes.run(Path(tmp) / "watchdog")
        loads.append(load_average())
        if not args.no_write:
            write_faults(faults, sys.argv[1:], (loads[0], loads[1]))
        return
    results = []
    with tempfile.TemporaryDirectory(prefix="sdtk-stress-") as tmp:
        for name in args.recipes:
            r = run_recipe(name, args.requests, Path(tmp))
            results.append(r)
            print(json.dumps(r))
    bad = [r for r in results if r["failed"] or r["wrong_outputs"] or r["stub_deaths"] or r["segfaults"]]
    if not args.no_write:
        write(results, sys.argv[1:])
    sys.exit(1 if bad else 0)
