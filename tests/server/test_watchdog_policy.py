"""The watchdog's crash-loop policy, its knobs, the durable record write, and rebuilding a
damaged record from the lock and the process table. No Triton: the "server" here is a real
process whose argv[0] is named tritonserver (a symlink to Python), started as sdtk starts one
(its own session, the deployment directory as its working directory)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from toolkit._fs import atomic_write
from toolkit.errors import UsageError
from toolkit.server import liveness, procs, recover, watchdog
from toolkit.server.lock import WorkdirLock
from toolkit.server.state import (
    RecordUnreadable,
    ServerState,
    python_stubs,
    read_state,
    server_status,
    state_path,
    stop_server,
    write_state,
)
from toolkit.server.watchdog import RestartPolicy


def test_backoff_doubles_from_the_second_failure_and_is_capped():
    rp = RestartPolicy(limit=5, backoff_s=1.0, backoff_max_s=5.0)
    assert [rp.delay(n) for n in range(1, 7)] == [0.0, 1.0, 2.0, 4.0, 5.0, 5.0]
    assert [rp.retry_delay(n) for n in range(1, 5)] == [1.0, 2.0, 4.0, 5.0]


def test_policy_knobs_from_the_environment_and_the_flags(monkeypatch):
    env = {"SDTK_RESTART_LIMIT": "2", "SDTK_RESTART_BACKOFF_S": "0.5", "SDTK_FROZEN_S": "1"}
    rp = RestartPolicy.from_env(env)
    assert (rp.limit, rp.backoff_s, rp.frozen_s, rp.window_s) == (2, 0.5, 1.0, 600.0)
    with pytest.raises(UsageError, match="SDTK_RESTART_WINDOW_S='soon'"):
        RestartPolicy.from_env({"SDTK_RESTART_WINDOW_S": "soon"})
    with pytest.raises(UsageError, match="SDTK_RESTART_LIMIT='1.5'"):
        RestartPolicy.from_env({"SDTK_RESTART_LIMIT": "1.5"})
    seen = {}
    monkeypatch.setattr(watchdog, "watch", lambda wd, policy, poll, rp: seen.update(rp=rp) or 0)
    monkeypatch.setenv("SDTK_RESTART_WINDOW_S", "60")
    assert watchdog.main(["/nowhere", "--limit", "3", "--backoff-max", "9"]) == 0
    assert seen["rp"] == RestartPolicy(limit=3, window_s=60.0, backoff_max_s=9.0)


def test_durable_write_uses_its_own_temporary_file_and_keeps_the_old_record(tmp_path, monkeypatch):
    path = tmp_path / "state.json"
    atomic_write(path, "old", mode=0o600, durable=True)
    assert path.read_text() == "old" and (path.stat().st_mode & 0o777) == 0o600
    real_write = os.write

    def full(fd, data):  # the disk fills up mid-write
        real_write(fd, bytes(data[:1]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError, match="No space left"):
        atomic_write(path, "new record", durable=True)
    monkeypatch.undo()
    assert path.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]  # no temporary file left


@pytest.fixture
def fake_server(tmp_path, request):
    """A process sdtk takes for the tritonserver of deployment directory `wd`: argv[0] named
    tritonserver, Triton's flags, its own session, the directory as its cwd, the lock held.
    With a model name as the parameter it starts one child named as Triton names a stub
    (`triton_python_backend_stub <repo>/<model>/1/model.py`)."""
    wd = tmp_path / "dep"
    wd.mkdir()
    exe = tmp_path / "bin" / "tritonserver"
    exe.parent.mkdir()
    exe.symlink_to(sys.executable)
    code = "import time; time.sleep(120)"
    if model := getattr(request, "param", None):
        model_py = tmp_path / "repo" / model / "1" / "model.py"
        model_py.parent.mkdir(parents=True)
        model_py.write_text(code)
        stub = tmp_path / "bin" / "triton_python_backend_stub"
        stub.symlink_to(sys.executable)
        code = (
            f"import subprocess, time; subprocess.Popen([{str(stub)!r}, {str(model_py)!r}]); time.sleep(120)"
        )
    key = "k3y"
    argv = [str(exe), "-c", code, "--model-repository=/repo", "--http-port=18000",
            "--grpc-port=18001", "--metrics-port=18002",
            "--backend-config=python,shm-region-prefix-name=sdtkfeed0001_",
            f"--http-restricted-api=model-repository:sdtk-repo-key={key}"]  # fmt: skip
    lock = WorkdirLock.acquire(wd, "a test")
    proc = subprocess.Popen(argv, cwd=wd, start_new_session=True, pass_fds=(lock.fd,))
    lock.record(server_pid=proc.pid)
    lock.close()
    (wd / "launch.json").write_text(json.dumps({"host": "127.0.0.1", "model_name": "ensemble"}))
    try:
        yield wd, proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
        proc.wait()


def test_an_unreadable_record_is_rebuilt_from_the_lock_and_the_process_table(fake_server):
    wd, proc = fake_server
    state_path(wd).write_text("{garbage")
    st = read_state(wd)
    assert st is not None and st.pid == proc.pid and st.pgid == proc.pid
    assert "unreadable" in st.rebuilt
    assert (st.http_port, st.grpc_port, st.metrics_port) == (18000, 18001, 18002)
    assert st.http_url == "http://127.0.0.1:18000" and st.model_repo == "/repo"
    assert st.shm_prefix == "sdtkfeed0001_" and st.repo_key == "k3y" and "k3y" not in " ".join(st.argv)
    assert recover.servers_of(wd) == [proc.pid]
    status = server_status(wd, timeout=0.2)
    assert status.pid == proc.pid and status.state == "unhealthy" and "rebuilt its record" in status.message
    # `sdtk stop`, as every hint says, stops it: nothing is orphaned, the record is gone.
    res = stop_server(wd, grace=1.0)
    assert res.was_running and res.pid == proc.pid and "rebuilt" in res.message
    proc.wait(5)
    assert not state_path(wd).exists() and not procs.alive(proc.pid)


def test_a_server_whose_record_was_deleted_is_still_found_and_stopped(fake_server):
    """The old hint said "delete it": a server with no state.json is still named by `status`
    (from the lock and the process table) and stopped by `sdtk stop`."""
    wd, proc = fake_server
    status = server_status(wd, timeout=0.2)
    assert status.pid == proc.pid and status.running and "is missing" in status.message
    res = stop_server(wd, grace=1.0)
    assert f"also stopped tritonserver pid {proc.pid}" in res.message
    proc.wait(5)
    assert not procs.alive(proc.pid) and server_status(wd).state == "stopped"


def test_stop_force_also_stops_a_server_the_record_does_not_name(fake_server):
    wd, proc = fake_server
    _record(wd)  # the record names another server (gone)
    assert "also stopped" not in stop_server(wd, grace=1.0).message
    assert procs.alive(proc.pid)  # without --force only the recorded one
    _record(wd)
    res = stop_server(wd, grace=1.0, force=True)
    assert f"also stopped tritonserver pid {proc.pid}" in res.message
    proc.wait(5)
    assert not procs.alive(proc.pid)


def test_an_unreadable_record_with_no_server_says_how_to_clear_it(tmp_path):
    wd = tmp_path / "dep"
    wd.mkdir()
    state_path(wd).write_text("")
    with pytest.raises(RecordUnreadable, match="no server of .* runs") as e:
        read_state(wd)
    assert "sdtk stop" in (e.value.hint or "")
    status = server_status(wd)
    assert status.state == "stopped" and not status.healthy and "unreadable" in status.message
    res = stop_server(wd)
    assert not res.was_running and "removed the unreadable" in res.message
    assert not state_path(wd).exists()


def _record(wd: Path, **changes) -> ServerState:
    st = ServerState(
        pid=2**22 - 3, pgid=2**22 - 3, start_ticks=1, started_at=time.time(), http_url="http://127.0.0.1:1",
        grpc_url="127.0.0.1:2", metrics_url="http://127.0.0.1:3/metrics", model_name="ensemble",
        model_repo=str(wd / "repo"), argv=["tritonserver"], log_path=str(wd / "logs" / "tritonserver.log"),
        workdir=str(wd),
    )  # fmt: skip
    st = replace(st, **changes)
    write_state(wd, st)
    return st


def test_status_of_a_restart_and_of_a_crash_loop(tmp_path):
    """What the watchdog records while it restarts and after it gave up, as `status` says it
    (a live "watchdog": this test process does not pass for one, so a sleeping one is started)."""
    wd = tmp_path / "dep"
    dog = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "-m", "toolkit.server.watchdog"]
    )
    try:
        _record(wd, status="restarting", watchdog_pid=dog.pid, restart_why="10:00:00 the stub died",
                restart_errors=2, restart_error="http port 1 is in use", next_restart_at=time.time() + 30)  # fmt: skip
        st = server_status(wd)
        assert st.state == "restarting" and st.running and not st.healthy
        assert st.message.startswith("failed 2 times: http port 1 is in use; after 10:00:00 the stub died")
        assert "next try in" in st.message
    finally:
        dog.kill()
        dog.wait()
    st = server_status(wd)  # the watchdog is gone: nothing restarts it
    assert st.state == "dead" and "is gone" in st.message and "sdtk stop" in st.message
    _record(wd, status="crash-loop", restart_why="the server failed 3 times within 600s",
            first_failure="09:00 first", first_failure_log="/x/tritonserver.1.log",
            failures=["09:00 first: restarted", "09:10 last: gave up (crash loop)"])  # fmt: skip
    st = server_status(wd)
    assert st.state == "crash-loop" and not st.running
    assert "first failure: 09:00 first (log /x/tritonserver.1.log)" in st.message
    assert "last failure: 09:10 last: gave up" in st.message


def test_the_first_failures_log_is_never_pruned(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    first = ""
    for pid in range(100, 110):
        (logs / "tritonserver.log").write_text(f"server {pid}")
        st = _record(tmp_path, pid=pid, log_path=str(logs / "tritonserver.log"))
        first = first or str(watchdog.failed_log(st))
        watchdog.keep_log(st, keep=3, first=first)
        time.sleep(0.01)  # distinct mtimes
    kept = sorted(p.name for p in logs.glob("tritonserver.*.log"))
    assert kept == [
        "tritonserver.100.log",
        "tritonserver.107.log",
        "tritonserver.108.log",
        "tritonserver.109.log",
    ]


@pytest.mark.parametrize("fake_server", ["tensorrt_llm"], indirect=True)
def test_a_frozen_stub_is_found_and_named_by_status(fake_server):
    """The server's stub stopped with SIGSTOP: `status` says which model's stub is frozen and
    how to resume it, and exits 1; the server itself stopped is named too."""
    wd, proc = fake_server
    deadline = time.monotonic() + 10
    while not (stubs := python_stubs(proc.pid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    stub = stubs["tensorrt_llm"][0]
    st = _record(wd, pid=proc.pid, pgid=proc.pid, start_ticks=procs.stat(proc.pid).start_ticks,
                 executable="tritonserver", stubs=stubs)  # fmt: skip
    assert liveness.frozen(st.pgid, st.pid) == {}

    def stop(pid: int) -> None:
        os.kill(pid, signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while procs.stat(pid).state != "T" and time.monotonic() < deadline:
            time.sleep(0.05)

    stop(stub)
    assert liveness.frozen(st.pgid, st.pid) == {"tensorrt_llm": [stub]}
    status = server_status(wd, timeout=0.2)
    assert status.state == "unhealthy" and not status.healthy
    assert f"stub of model 'tensorrt_llm' (pid {stub}) is frozen" in status.message
    assert f"kill -CONT {stub}" in status.message
    stop(proc.pid)
    assert list(liveness.frozen(st.pgid, st.pid)) == ["tritonserver", "tensorrt_llm"]
