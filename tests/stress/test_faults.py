"""Faults on a served deployment: racing deploys, a read-only workdir, a Python
backend stub killed mid-request.

One tiny-draft-target deployment (its BLS, decoupled, calls `tensorrt_llm` through BLS) is made
by two racing `sdtk deploy` processes, shared by the module and broken on purpose; the tests run
in file order. Real embedded Triton, real `sdtk` processes, real stubs, SIGKILL from outside, as
an operator's OOM killer would.

Triton 2.51 never answers the requests a dead stub held (server#8604): without sdtk's watch the
BLS waited on its sub-request forever, and every later BLS request queued behind it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from tests.stress.conftest import diagnosis
from toolkit.server import procs
from toolkit.server.state import python_stubs, stop_server

ROOT = Path(__file__).resolve().parents[2]
RECIPE = str(ROOT / "recipes" / "tiny-draft-target.yaml")
pytestmark = [pytest.mark.tritonserver, pytest.mark.slow]
DEADLINE_S = 5.0  # "ends with an error within 5 s" (behavioural; the watch checks every 0.2 s)


def deploy_cmd(workdir: Path) -> list[str]:
    # No watchdog (`--on-failure none`): these tests kill stubs and bring them back by hand.
    return [sys.executable, "-m", "toolkit.cli", "deploy", RECIPE, "--workdir", str(workdir), "--detach",
            "--auto-ports", "--no-validate", "--on-failure", "none"]  # fmt: skip


def sdtk(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL, cwd=ROOT
    )


@pytest.fixture(scope="module")
def raced(tmp_path_factory):
    """Two `sdtk deploy --detach` racing into one workdir: (their CompletedProcesses, the
    winner's deployment as a DeployResult-like namespace)."""
    workdir = tmp_path_factory.mktemp("faults")
    dep = workdir / "tiny-draft-target"
    procs_ = [
        subprocess.Popen(deploy_cmd(workdir), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         stdin=subprocess.DEVNULL, cwd=ROOT)
        for _ in range(2)
    ]  # fmt: skip
    try:
        done = [subprocess.CompletedProcess(p.args, p.wait(300), *p.communicate()) for p in procs_]
        for p, r in zip(procs_, done, strict=True):
            r.pid = p.pid  # type: ignore[attr-defined]
        st = json.loads((dep / "state.json").read_text()) if (dep / "state.json").is_file() else {}
        result = SimpleNamespace(
            pid=st.get("pid"), workdir=dep, http_url=st.get("http_url"), model=st.get("model_name")
        )
        yield done, result
    finally:
        for p in procs_:
            if p.poll() is None:
                p.kill()
        with contextlib.suppress(Exception):
            stop_server(dep, grace=0.5)


def servers_of(repo: Path) -> list[int]:
    """The tritonserver processes that serve `repo`."""
    flag = f"--model-repository={repo}"
    return [pid for pid in procs.find_processes("tritonserver") if flag in procs.cmdline(pid)]


def test_racing_deploys_one_wins_and_the_other_names_it(raced):
    done, result = raced
    codes = sorted(r.returncode for r in done)
    assert codes == [0, 1], [(r.returncode, r.stderr[-500:]) for r in done]
    loser, winner = sorted(done, key=lambda r: -r.returncode)
    # The loser names the winner: its sdtk deploy (the lock's holder), or the server it started.
    named = (f"sdtk deploy tiny-draft-target (pid {winner.pid})", f"tritonserver (pid {result.pid})")
    assert "is in use by" in loser.stderr and any(n in loser.stderr for n in named), loser.stderr
    assert "Traceback" not in loser.stderr
    assert servers_of(result.workdir / "triton_repo") == [result.pid]
    # Greedy outputs before any fault, for the recovery test.
    result.before = {m: greedy(result, m) for m in (result.model, "ensemble")}


def greedy(result, model: str) -> str:
    r = httpx.post(
        f"{result.http_url}/v2/models/{model}/generate",
        json={"text_input": "def f(x):", "max_tokens": 16},
        timeout=120,
    )
    assert r.status_code == 200, r.text
    return r.json()["text_output"]


def test_model_control_is_refused_without_the_deployments_key(raced):
    _, result = raced
    for path in ("models/tensorrt_llm/unload", "models/tensorrt_llm/load", "index"):
        r = httpx.post(f"{result.http_url}/v2/repository/{path}", json={}, timeout=30)
        assert r.status_code == 403 and "restricted" in r.text, (path, r.status_code, r.text)
    r = httpx.post(
        f"{result.http_url}/v2/repository/models/tensorrt_llm/unload",
        json={},
        headers={"sdtk-repo-key": "guess"},
        timeout=30,
    )
    assert r.status_code == 403
    assert greedy(result, result.model) == result.before[result.model]  # nothing was unloaded
    state_file = result.workdir / "state.json"
    key = json.loads(state_file.read_text())["repo_key"]
    assert len(key) >= 24 and state_file.stat().st_mode & 0o777 == 0o600
    status = sdtk([sys.executable, "-m", "toolkit.cli", "status", "--workdir", str(result.workdir), "--json"])
    assert status.returncode == 0 and key not in status.stdout
    assert key not in (result.workdir / "logs" / "tritonserver.log").read_text(errors="replace")


def test_deploy_into_a_live_workdir_is_refused_before_touching_it(raced):
    _, result = raced
    dep = result.workdir
    before = {p: p.stat().st_mtime_ns for p in dep.rglob("*") if p.is_file() and p.name != "tritonserver.log"}
    again = sdtk(deploy_cmd(dep.parent))
    assert again.returncode == 1, again.stderr
    assert f"tritonserver (pid {result.pid}) still runs" in again.stderr, again.stderr
    after = {p: p.stat().st_mtime_ns for p in dep.rglob("*") if p.is_file() and p.name != "tritonserver.log"}
    assert after == before  # nothing rebuilt, re-rendered or rewritten (state.json, recipe.json)


@contextlib.contextmanager
def read_only_dir(path: Path):
    """`path`, unwritable: a read-only bind mount as root (root ignores permissions), else mode 555."""
    path.mkdir()
    if os.geteuid() != 0:
        path.chmod(0o555)
        yield path
        return
    if subprocess.run(["mount", "-o", "bind,ro", str(path), str(path)], capture_output=True).returncode:
        pytest.skip("root without the right to mount: no way to make a read-only directory here")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


def test_read_only_workdir_is_a_clear_error(tmp_path):
    with read_only_dir(tmp_path / "ro") as ro:
        r = sdtk(deploy_cmd(ro))
    assert r.returncode == 1, r.stderr
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr
    reason = "read-only file system" if os.geteuid() == 0 else "not writable"
    assert f"the workdir {ro / 'tiny-draft-target'}" in r.stderr and reason in r.stderr, r.stderr


def stream_events(url: str, body: dict, first: threading.Event, events: list, timeout: float = 60) -> None:
    """POST a generate_stream request and collect its SSE events (the last: an exception, if any)."""
    try:
        with httpx.Client(timeout=timeout) as c, c.stream("POST", url, json=body) as r:
            for line in r.iter_lines():
                if line.startswith("data:"):
                    events.append(json.loads(line[5:]))
                    first.set()
    except Exception as e:  # a hang shows up as a ReadTimeout here
        events.append({"exception": repr(e)})
    finally:
        first.set()


def generate(url: str, body: dict, events: list, timeout: float = 60) -> None:
    """POST a generate request; its JSON answer (or the exception) goes to `events`."""
    try:
        events.append(httpx.post(url, json=body, timeout=timeout).json())
    except Exception as e:
        events.append({"exception": repr(e)})


def infer_body(prompt: str, max_tokens: int) -> dict:
    return {
        "inputs": [
            {"name": "text_input", "shape": [1, 1], "datatype": "BYTES", "data": [prompt]},
            {"name": "max_tokens", "shape": [1, 1], "datatype": "INT32", "data": [max_tokens]},
        ]
    }


def test_bls_request_ends_with_an_error_when_its_model_dies_mid_request(raced):
    _, result = raced
    stubs = python_stubs(result.pid)
    bls_config = (result.workdir / "triton_repo" / result.model / "config.pbtxt").read_text()
    decoupled = "decoupled: true" in bls_config
    # num_draft_tokens 0: one call of tensorrt_llm for 1000 tokens, so the kill lands while the
    # BLS waits on that sub-request (the case that hung).
    body = {"text_input": "import os\n", "max_tokens": 1000, "num_draft_tokens": 0}
    first, events = threading.Event(), []
    if decoupled:
        url = f"{result.http_url}/v2/models/{result.model}/generate_stream"
        client = threading.Thread(target=stream_events, args=(url, {**body, "stream": True}, first, events))
    else:
        url = f"{result.http_url}/v2/models/{result.model}/generate"
        client = threading.Thread(target=generate, args=(url, body, events))
    client.start()
    if decoupled:
        assert first.wait(120), diagnosis(result)
        assert "error" not in events[0] and "exception" not in events[0], events[0]
    else:
        time.sleep(1.5)  # well into the 1000 tokens
        assert not events, events
    os.kill(stubs["tensorrt_llm"][0], signal.SIGKILL)
    killed = time.monotonic()
    client.join(timeout=DEADLINE_S + 30)
    ended = time.monotonic() - killed
    assert ended < DEADLINE_S, (
        f"the request ran {ended:.1f}s after the kill: {events[-1]}\n{diagnosis(result)}"
    )
    assert "'tensorrt_llm' is down" in events[-1].get("error", ""), events[-1]

    # Later BLS requests are answered at once (they used to queue behind the hung one), as a
    # server fault: UNAVAILABLE, which KServe's /infer answers with 503. (Triton 2.51's generate
    # endpoint answers every model error with 400, and /infer refuses decoupled models.)
    t0 = time.monotonic()
    if decoupled:
        r = httpx.post(f"{result.http_url}/v2/models/{result.model}/generate", json=body, timeout=60)
        assert r.status_code == 400
    else:
        r = httpx.post(
            f"{result.http_url}/v2/models/{result.model}/infer", json=infer_body("def f", 8), timeout=60
        )
        assert r.status_code == 503
    assert time.monotonic() - t0 < DEADLINE_S
    assert "'tensorrt_llm' is down" in r.json()["error"], r.text
    assert set(python_stubs(result.pid)) == set(stubs) - {"tensorrt_llm"}


def liveness_probe(result) -> subprocess.CompletedProcess:
    """The Kubernetes liveness probe's command (toolkit.ops.k8s): stubcheck.py run on its own."""
    script = ROOT / "toolkit" / "server" / "stubcheck.py"
    repo = result.workdir / "triton_repo"
    return sdtk([sys.executable, "-I", str(script), str(repo), "--url", result.http_url])


def test_restart_brings_the_dead_model_back_without_touching_the_others(raced):
    _, result = raced
    dep = str(result.workdir)
    status = sdtk([sys.executable, "-m", "toolkit.cli", "status", "--workdir", dep])
    assert status.returncode == 1 and f"sdtk restart tensorrt_llm --workdir {dep}" in status.stdout
    # The Kubernetes liveness probe's check sees the dead stub too, while /v2/health/live is 200.
    assert httpx.get(f"{result.http_url}/v2/health/live", timeout=10).status_code == 200
    probe = liveness_probe(result)
    assert probe.returncode == 1 and "tensorrt_llm" in probe.stdout, probe
    others = {m: p for m, p in python_stubs(result.pid).items() if m != "tensorrt_llm"}
    r = sdtk([sys.executable, "-m", "toolkit.cli", "restart", "tensorrt_llm", "--workdir", dep, "--json"])
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["restarts"] == 1
    stubs = python_stubs(result.pid)
    assert stubs["tensorrt_llm"] and {m: p for m, p in stubs.items() if m != "tensorrt_llm"} == others
    status = sdtk([sys.executable, "-m", "toolkit.cli", "status", "--workdir", dep, "--json"])
    assert status.returncode == 0, status.stdout
    assert json.loads(status.stdout)["model_restarts"] == {"tensorrt_llm": 1}
    assert "restarted: 'tensorrt_llm' ×1" in json.loads(status.stdout)["message"]
    assert {m: greedy(result, m) for m in result.before} == result.before  # the same greedy outputs
    probe = liveness_probe(result)
    assert probe.returncode == 0, probe
    bad = sdtk([sys.executable, "-m", "toolkit.cli", "restart", "tensorrt_llmm", "--workdir", dep])
    assert bad.returncode == 2 and "did you mean 'tensorrt_llm'" in bad.stderr


def test_status_reports_the_crash_of_a_large_form_encoded_request(raced):
    """Finding 1, upstream (server#5840, libevhtp#118): Triton 2.51's HTTP frontend parses a
    form-encoded body as query arguments and segfaults on a large one, before any model runs.
    sdtk cannot patch it (docs/runbooks/troubleshooting.md has the proxy); status names the crash."""
    _, result = raced
    body = json.dumps({"text_input": "y" * 5_000_000, "max_tokens": 4})
    with contextlib.suppress(httpx.HTTPError):  # the connection dies with the server
        httpx.post(
            f"{result.http_url}/v2/models/{result.model}/generate",
            content=body,
            headers={"Content-Type": "application/x-www-form-urlencoded"},
            timeout=60,
        )
    deadline = time.monotonic() + 30
    while procs.alive(result.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    status = sdtk([sys.executable, "-m", "toolkit.cli", "status", "--workdir", str(result.workdir), "--json"])
    report = json.loads(status.stdout)
    assert status.returncode == 1 and report["state"] == "dead", report
    assert "crashed: Signal (11) received at" in report["message"], report["message"]
    # The site, resolved from Triton's own backtrace against the binary's symbols.
    assert " in evhtp_parse_query" in report["message"] and "server#5840" in report["message"], report[
        "message"
    ]
