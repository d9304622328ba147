"""A deployment's lifecycle when things die: stubs killed, `sdtk deploy` killed before READY,
a supervised deployment whose stub dies. Real embedded Triton, real `sdtk` processes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from watchdog_support import long_stream

from toolkit.server import procs
from toolkit.server.state import python_stubs as procs_stubs

ROOT = Path(__file__).resolve().parents[2]
RECIPE = str(ROOT / "recipes" / "tiny-eagle3.yaml")
pytestmark = [pytest.mark.tritonserver, pytest.mark.slow]


def sdtk(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "toolkit.cli", *args],
        capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, cwd=ROOT,
    )  # fmt: skip


def spawn_deploy(workdir: Path, *extra: str, validate: bool = False) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "toolkit.cli", "deploy", RECIPE, "--workdir", str(workdir), "--auto-ports",
         *([] if validate else ["--no-validate"]), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL, cwd=ROOT,
    )  # fmt: skip


def state(dep: Path) -> dict:
    return json.loads((dep / "state.json").read_text())


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def ready_state(dep: Path) -> dict | None:
    try:
        st = state(dep)
    except (OSError, ValueError):
        return None
    return st if st["status"] == "ready" and st["stubs"] else None


@pytest.mark.alone  # its Python backend's /tmp/python_env_* is found by what appeared since launch: another server starting beside it makes that ambiguous
def test_killed_stub_makes_status_fail_and_stop_cleans_shm(tmp_path):
    r = sdtk("deploy", RECIPE, "--workdir", str(tmp_path), "--detach", "--auto-ports", "--no-validate",
             "--on-failure", "none")  # fmt: skip
    assert r.returncode == 0, r.stderr
    dep = tmp_path / "tiny-eagle3"
    st = state(dep)
    assert set(st["stubs"]) >= {"tensorrt_llm", "preprocessing", "postprocessing"}
    assert list(Path("/dev/shm").glob(st["shm_prefix"] + "*"))
    # The Python backend's /tmp/python_env_* directory (Triton never removed it: one per deploy).
    assert Path(st["python_env"]).name.startswith("python_env_") and Path(st["python_env"]).is_dir()
    assert sdtk("status", "--workdir", str(dep)).returncode == 0
    os.kill(st["stubs"]["tensorrt_llm"][0], signal.SIGKILL)
    t0 = time.monotonic()
    r = sdtk("status", "--workdir", str(dep), "--json")
    assert time.monotonic() - t0 < 5
    assert r.returncode == 1
    report = json.loads(r.stdout)
    assert report["state"] == "unhealthy" and "tensorrt_llm" in report["dead_stubs"]
    assert "'tensorrt_llm'" in report["message"]
    validate = sdtk("validate", "--workdir", str(dep))
    assert validate.returncode != 0 and "'tensorrt_llm'" in validate.stderr
    assert sdtk("stop", "--workdir", str(dep)).returncode == 0
    assert not procs.group_members(st["pgid"])
    assert not list(Path("/dev/shm").glob(st["shm_prefix"] + "*"))
    assert not Path(st["python_env"]).exists()


def test_deploy_killed_before_ready_leaves_no_orphan(tmp_path):
    dep = tmp_path / "tiny-eagle3"
    proc = spawn_deploy(tmp_path, validate=True)
    st = wait_for(lambda: (dep / "state.json").is_file() and state(dep), 60, "state.json")
    assert st["status"] == "starting" and procs.alive(st["pid"])
    proc.send_signal(signal.SIGKILL)  # before READY: no handler runs
    proc.wait()
    log = dep / "logs" / "tritonserver.log"
    assert procs.alive(st["pid"])  # the orphan runs on, recorded
    status = sdtk("status", "--workdir", str(dep), "--json")
    assert status.returncode == 1 and json.loads(status.stdout)["pid"] == st["pid"]
    # A redeploy into the same workdir refuses while the orphan lives, and keeps its log.
    size = log.stat().st_size
    again = sdtk("deploy", RECIPE, "--workdir", str(tmp_path), "--detach", "--auto-ports", "--no-validate")
    assert again.returncode != 0 and str(st["pid"]) in again.stderr
    assert log.stat().st_size >= size
    # Once the orphan is READY, status says its validation never finished (a deploy killed mid-validation)...
    wait_for(lambda: "unvalidated" in sdtk("status", "--workdir", str(dep)).stdout, 120, "READY")
    report = json.loads(sdtk("status", "--workdir", str(dep), "--json").stdout)
    assert report["validation"] == "unfinished" and f"(pid {st['owner_pid']}) is gone" in report["message"]
    # ... and finds the server's stubs itself (none were recorded): a dead one makes it unhealthy.
    assert state(dep)["stubs"] == {}
    os.kill(procs_stubs(st["pgid"])["tensorrt_llm"][0], signal.SIGKILL)
    status = sdtk("status", "--workdir", str(dep), "--json")
    assert status.returncode == 1 and json.loads(status.stdout)["dead_stubs"] == {"tensorrt_llm": []}
    assert "'tensorrt_llm' (no stub running)" in json.loads(status.stdout)["message"]
    assert sdtk("stop", "--workdir", str(dep)).returncode == 0
    assert not procs.alive(st["pid"]) and not procs.group_members(st["pgid"])
    assert not list(Path("/dev/shm").glob(st["shm_prefix"] + "*"))


HANG_DEADLINE_S = 5.0  # the fault suite's promise: no fault hangs a client beyond 5 s


def kill_mid_ensemble_stream(st: dict) -> tuple[float, dict]:
    """Kill the `tensorrt_llm` stub while an `ensemble` stream of 1000 tokens runs (after its
    first chunk): Triton 2.51 holds such a request until the server ends. Returns the seconds
    from the kill to the end of the client's request, and its last event."""
    t, first, events = long_stream(st, "ensemble", 1000)
    assert first.wait(120) and "exception" not in events[0], events
    os.kill(procs_stubs(st["pid"])["tensorrt_llm"][0], signal.SIGKILL)
    killed = time.monotonic()
    t.join(90)
    return time.monotonic() - killed, events[-1]


def greedy(st: dict) -> str:
    body = {"text_input": "def f(x):", "max_tokens": 16}
    r = httpx.post(f"{st['http_url']}/v2/models/ensemble/generate", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["text_output"]


def test_supervised_deploy_exits_on_a_dead_stub(tmp_path):
    dep = tmp_path / "tiny-eagle3"
    proc = spawn_deploy(tmp_path)
    try:
        st = wait_for(lambda: ready_state(dep), 120, "READY")
        seconds, last = kill_mid_ensemble_stream(st)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    # The stream the dead stub held ends with the server, within seconds (not at the client's
    # timeout, nor at Triton's 10 s exit timeout).
    assert seconds < HANG_DEADLINE_S and "exception" in last, (seconds, last)
    assert proc.returncode != 0
    assert "'tensorrt_llm'" in err and "died" in err
    assert not procs.group_members(st["pgid"])


def test_detached_deploys_watchdog_ends_held_requests_and_restarts_the_server(tmp_path):
    """`sdtk deploy --detach` (default `--on-failure restart`): its watchdog ends the requests a
    dead stub held through the ensemble within seconds, brings the server back on the same
    ports with the same greedy outputs, does the same for a crashed server (the large
    form-encoded request that segfaults Triton, server#5840), records both for `status`, and leaves with `sdtk stop`."""
    r = sdtk(
        "deploy", RECIPE, "--workdir", str(tmp_path), "--detach", "--auto-ports", "--no-validate", "--json"
    )
    assert r.returncode == 0, r.stderr
    dep = tmp_path / "tiny-eagle3"
    st = state(dep)
    watchdog = json.loads(r.stdout)["watchdog_pid"]
    assert st["watchdog_pid"] == watchdog and st["watchdog_policy"] == "restart" and procs.alive(watchdog)
    try:
        before = greedy(st)
        seconds, last = kill_mid_ensemble_stream(st)
        assert seconds < HANG_DEADLINE_S and "exception" in last, (seconds, last)
        new = wait_for(lambda: (s := ready_state(dep)) and s["restarts"] == 1 and s, 120, "the restart")
        assert new["pid"] != st["pid"] and new["http_url"] == st["http_url"]
        assert greedy(new) == before
        status = sdtk("status", "--workdir", str(dep), "--json")
        report = json.loads(status.stdout)
        assert status.returncode == 0 and report["state"] == "running", report
        assert "server restarted ×1" in report["message"] and "'tensorrt_llm'" in report["failures"][-1]
        assert (dep / "logs" / f"tritonserver.{st['pid']}.log").is_file()

        body = json.dumps({"text_input": "y" * 5_000_000, "max_tokens": 4})
        with contextlib.suppress(httpx.HTTPError):  # Triton 2.51 crashes on it (server#5840)
            httpx.post(f"{new['http_url']}/v2/models/ensemble/generate", content=body, timeout=60,
                       headers={"Content-Type": "application/x-www-form-urlencoded"})  # fmt: skip
        third = wait_for(lambda: (s := ready_state(dep)) and s["restarts"] == 2 and s, 120, "the restart")
        assert greedy(third) == before
        crash = state(dep)["failures"][-1]
        assert "Signal (11) received" in crash and f"tritonserver.{new['pid']}.log" in crash, crash
    finally:
        stop = sdtk("stop", "--workdir", str(dep))
    assert stop.returncode == 0, stop.stderr
    assert not procs.alive(watchdog) and not (dep / "state.json").exists()


def test_supervised_deploy_restarts_on_failure(tmp_path):
    dep = tmp_path / "tiny-eagle3"
    proc = spawn_deploy(tmp_path, "--restart-on-failure")
    try:
        st = wait_for(lambda: ready_state(dep), 120, "READY")
        os.kill(st["stubs"]["tensorrt_llm"][0], signal.SIGKILL)
        new = wait_for(lambda: (s := ready_state(dep)) and s["restarts"] == 1 and s, 120, "the restart")
        assert new["pid"] != st["pid"] and new["http_url"] == st["http_url"]
        assert sdtk("status", "--workdir", str(dep)).returncode == 0
        r = sdtk("infer", "def f(x):", "--workdir", str(dep), "--max-tokens", "8")
        assert r.returncode == 0, r.stderr
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    assert not procs.group_members(new["pgid"])


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_bench_stopped_by_a_signal_stops_the_server_it_deployed(tmp_path, sig):
    """`kill` (or a CI timeout, a closed terminal) while `sdtk bench RECIPE` measures: the
    server it deployed is stopped as on Ctrl-C, its record removed, and sdtk exits 128 + the
    signal's number within seconds. Before, SIGTERM ended the process at once and left
    tritonserver and its stubs running."""
    work = tmp_path / "work"
    dep = work / "tiny-eagle3"
    proc = subprocess.Popen(
        [sys.executable, "-m", "toolkit.cli", "bench", RECIPE, "--workdir", str(work), "--requests", "500",
         "--concurrency", "1", "--max-tokens", "32"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL, cwd=ROOT,
    )  # fmt: skip
    try:
        st = wait_for(lambda: ready_state(dep), 120, "READY")
        time.sleep(3)  # validation done, the benchmark's requests under way
        assert proc.poll() is None
        proc.send_signal(sig)
        t0 = time.monotonic()
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + int(sig), err
    assert f"sdtk: stopped by {signal.Signals(sig).name}" in err
    assert took < 30, took
    assert not procs.alive(st["pid"]) and not procs.group_members(st["pgid"])
    assert not (dep / "state.json").exists()
    assert not list(Path("/dev/shm").glob(st["shm_prefix"] + "*"))
