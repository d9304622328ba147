"""Detached servers (deploy --detach, status, logs, stop) and foreground Ctrl-C, checked
against /proc: no tritonserver or Python backend stub may survive a stop."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from toolkit.client import TritonClient
from toolkit.errors import WorkdirError
from toolkit.server import procs
from toolkit.server.launch import TritonServer
from toolkit.server.state import (
    ServerState,
    follow_logs,
    read_logs,
    read_state,
    server_status,
    state_path,
    stop_server,
    write_state,
)

from .conftest import processes_mentioning

pytestmark = pytest.mark.tritonserver

ROOT = Path(__file__).resolve().parents[2]

DETACH = """
import sys
from toolkit.server.launch import TritonServer
s = TritonServer(sys.argv[1], workdir=sys.argv[2], auto_ports=True, ready_timeout=60)
s.start(detach=True)
print(s.pid)
"""

FOREGROUND = """
import sys
from toolkit.server.launch import TritonServer
s = TritonServer(sys.argv[1], workdir=sys.argv[2], auto_ports=True, ready_timeout=60, echo=sys.stderr)
s.start()
print("READY", s.pid, flush=True)
print("STOPPED", s.serve_forever(), flush=True)
"""


def run_detached(repo: Path, wd: Path) -> int:
    """`sdtk deploy --detach` in miniature: a process that starts the server and exits."""
    out = subprocess.run(
        [sys.executable, "-c", DETACH, str(repo), str(wd)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip())


@pytest.mark.alone  # its Python backend's /tmp/python_env_* is found by what appeared since launch: another server starting beside it makes that ambiguous
@pytest.mark.slow  # over 5 s (pytest --durations on the 2-core box)
def test_detach_status_logs_stop_cycles(make_repo, tmp_path):
    repo = make_repo({"ensemble": dict(decoupled=True, max_batch_size=8)})
    wd = tmp_path / "wd"
    for cycle in range(2):
        pid = run_detached(repo, wd)
        # The launching process is gone; the server lives on, recorded in state.json.
        data = json.loads(state_path(wd).read_text())
        assert data["pid"] == pid and data["model_name"] == "ensemble"
        assert data["model_repo"] == str(repo) and data["log_path"] == str(wd / "logs" / "tritonserver.log")
        assert data["http_url"].startswith("http://127.0.0.1:") and data["grpc_url"].startswith("127.0.0.1:")
        assert data["metrics_url"].endswith("/metrics") and data["argv"][0].endswith("tritonserver")
        assert data["started_at"] <= time.time() and data["start_ticks"] == procs.stat(pid).start_ticks
        # The Python backend's /tmp/python_env_* directory, which Triton never removed.
        assert Path(data["python_env"]).name.startswith("python_env_") and Path(data["python_env"]).is_dir()

        st = server_status(wd)
        assert st.state == "running" and st.live and st.ready and st.model_ready, st.message
        assert st.pid == pid and pid in st.processes and len(st.processes) >= 2  # + the stub
        assert st.uptime_s is not None and st.uptime_s >= 0

        with TritonClient.from_workdir(wd) as c:
            assert c.generate("hi there", max_tokens=2).text == " hi there"
        with TritonClient.from_workdir(wd, protocol="grpc") as c:
            assert c.stream("hi", max_tokens=2).response.num_chunks == 2
        # The directory above the deployment works too (the CLI's one --workdir resolver).
        with TritonClient.from_workdir(tmp_path) as c:
            assert c.generate("hi there", max_tokens=2).text == " hi there"

        assert "Started GRPCInferenceService" in read_logs(wd)
        assert len(read_logs(wd, lines=3).splitlines()) == 3
        follow = follow_logs(wd, lines=2)
        assert len([next(follow), next(follow)]) == 2
        follow.close()

        # The detached server holds the workdir lock it inherited (toolkit.server.lock).
        with pytest.raises(WorkdirError, match=rf"is in use by .*tritonserver \(pid {pid}\) still runs"):
            TritonServer(repo, workdir=wd, auto_ports=True).start()

        res = stop_server(wd)
        assert res.was_running and res.graceful and res.pid == pid, res.message
        assert not state_path(wd).exists() and not Path(data["python_env"]).exists()
        assert processes_mentioning(str(tmp_path)) == [], f"cycle {cycle}"
        assert server_status(wd).state == "stopped"
        assert not stop_server(wd).was_running  # idempotent


@pytest.mark.alone  # its Python backend's /tmp/python_env_* is found by what appeared since launch: another server starting beside it makes that ambiguous
def test_dead_server_is_reported_and_cleaned(make_repo, tmp_path):
    repo = make_repo({"ensemble": dict(decoupled=True, max_batch_size=8)})
    wd = tmp_path / "wd"
    pid = run_detached(repo, wd)
    env_dir = Path(json.loads(state_path(wd).read_text())["python_env"])
    assert env_dir.is_dir()
    os.kill(pid, signal.SIGKILL)
    assert procs.wait_gone(pid, 10)
    st = server_status(wd)
    assert st.state == "dead" and "sdtk stop" in st.message
    # `logs -f` of a dead server ends by itself.
    lines = list(follow_logs(wd, lines=3))
    assert len(lines) >= 3
    res = stop_server(wd)
    assert not res.was_running and "was not running" in res.message
    assert processes_mentioning(str(tmp_path)) == []  # orphaned stubs killed too
    assert read_state(wd) is None and not env_dir.exists()


def test_reused_pid_is_never_signalled(tmp_path):
    wd = tmp_path / "wd"
    me = os.getpid()
    write_state(
        wd,
        ServerState(
            pid=me,
            pgid=os.getpgid(0),
            start_ticks=procs.stat(me).start_ticks + 1,  # "another process with our pid"
            started_at=time.time(),
            http_url="http://127.0.0.1:1",
            grpc_url="127.0.0.1:2",
            metrics_url="http://127.0.0.1:3/metrics",
            model_name="ensemble",
            model_repo=str(tmp_path),
            argv=["tritonserver"],
            log_path=str(tmp_path / "log"),
            workdir=str(wd),
        ),
    )
    st = server_status(wd)
    assert st.state == "dead" and "another program" in st.message and st.processes == []
    res = stop_server(wd)  # must not signal us (we are alive to check)
    assert not res.was_running and read_state(wd) is None


@pytest.mark.slow  # over 5 s (pytest --durations on the 2-core box)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_foreground_stops_cleanly_on_signal(make_repo, tmp_path, sig):
    repo = make_repo({"ensemble": dict(decoupled=True, max_batch_size=8)})
    wd = tmp_path / "wd"
    proc = subprocess.Popen(
        [sys.executable, "-c", FOREGROUND, str(repo), str(wd)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("READY"), proc.stderr.read()
        server_pid = int(line.split()[1])
        assert processes_mentioning(str(tmp_path))
        # Recorded too, so that `sdtk status/infer` work from another shell.
        data = json.loads(state_path(wd).read_text())
        assert data["pid"] == server_pid and data["detached"] is False and data["owner_pid"] == proc.pid
        assert server_status(wd).state == "running"
        t0 = time.monotonic()
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert f"STOPPED {int(sig)}" in out
    assert time.monotonic() - t0 < 20
    assert "Started HTTPService" in err  # echoed log
    assert not procs.alive(server_pid)
    assert processes_mentioning(str(tmp_path)) == []
    assert not state_path(wd).exists()


@pytest.mark.slow  # over 5 s (pytest --durations on the 2-core box)
def test_foreground_server_stopped_from_another_shell(make_repo, tmp_path):
    repo = make_repo({"ensemble": dict(decoupled=True, max_batch_size=8)})
    wd = tmp_path / "wd"
    proc = subprocess.Popen(
        [sys.executable, "-c", FOREGROUND, str(repo), str(wd)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout.readline().startswith("READY")
        res = stop_server(wd)
        assert res.was_running and res.graceful
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0 and "STOPPED 0" in out
    assert processes_mentioning(str(tmp_path)) == [] and not state_path(wd).exists()
