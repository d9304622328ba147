"""Launching tritonserver: failures reported before launch or with Triton's own reasons,
and a server that dies under a streaming request."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import threading
import time

import pytest

from toolkit.client import AsyncTritonClient, ClientError, ConnectionLost, TritonClient
from toolkit.errors import ServerError
from toolkit.server import procs
from toolkit.server.launch import ServerSite, ServerStartError, TritonServer
from toolkit.server.ports import PortInUseError, free_ports

from .conftest import processes_mentioning

pytestmark = pytest.mark.tritonserver

OK = dict(decoupled=True, max_batch_size=8)


def test_port_taken_is_reported_before_launch(make_repo, tmp_path):
    repo = make_repo({"ensemble": OK})
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    http, metrics = free_ports(2)
    server = TritonServer(
        ServerSite(repo, http_port=http, grpc_port=port, metrics_port=metrics), workdir=tmp_path / "wd"
    )
    try:
        with pytest.raises(PortInUseError) as ei:
            server.start()
    finally:
        holder.close()
    e = ei.value
    assert e.port == port and e.kind == "grpc"
    assert f"grpc port {port}" in str(e) and f"held by pid {os.getpid()}" in str(e)
    assert "serving.grpc_port" in e.hint
    assert server.pid is None  # nothing was launched
    assert not (tmp_path / "wd" / "logs" / "tritonserver.log").exists()


@pytest.mark.alone  # counts /tmp/python_env_* left after a failed start: another server starting beside it adds its own
def test_model_failing_to_load(make_repo, tmp_path):
    from toolkit.server import state

    repo = make_repo({"ensemble": dict(OK, fail_initialize=True)})
    server = TritonServer(repo, workdir=tmp_path / "wd", auto_ports=True)
    envs_before = state.python_env_dirs()
    with pytest.raises(ServerStartError) as ei:
        server.start(ready_timeout=60)
    e = ei.value
    # Its Python backend started (the model's initialize raised) and made its /tmp directory;
    # the failed start removed it, unless another server runs (then whose it is is unknown).
    left = state.python_env_dirs() - envs_before
    if procs.find_processes("tritonserver"):
        assert len(left) <= 1
    else:
        assert left == set()
    assert e.reason == "exited" and e.returncode not in (None, 0) and e.pid
    msg = str(e)
    assert "failed to load 'ensemble' version 1" in msg
    assert "engine file not found: /nonexistent/rank0.engine" in msg
    assert f"(pid {e.pid})" in msg and "s after launch" in msg
    assert e.errors[0].startswith("failed to load 'ensemble'")
    assert 0 < len(e.log_tail.splitlines()) <= 50 and "UNAVAILABLE" in e.log_tail
    assert e.log_path == tmp_path / "wd" / "logs" / "tritonserver.log"
    assert "model repository" in e.hint
    assert processes_mentioning(str(tmp_path)) == []


@pytest.mark.slow
def test_a_lost_stub_handshake_fails_fast_and_is_retried_once(make_repo, tmp_path, monkeypatch, caplog):
    """A stub that said it finished initialize() while Triton never takes its model as loaded
    (Triton 2.51 now and then loses that handshake, and then waits forever: a CI run hung 9
    minutes on it): found HANDSHAKE_S after the line, the server is started again once, then
    the start fails with the reason, and nothing is left behind. The fake model writes the
    line sdtk's models write (toolkit/serving/triton.py) and then blocks."""
    from pathlib import Path

    from toolkit.server import readiness

    serving = Path(readiness.__file__).parents[1] / "serving" / "triton.py"  # needs pb_utils to import
    assert 'INITIALIZED = "sdtk-serving: initialized instance"' in serving.read_text()  # the fake's line
    monkeypatch.setattr(readiness, "HANDSHAKE_S", 2.0)
    repo = make_repo({"ensemble": dict(OK, lose_handshake=True)})
    server = TritonServer(repo, workdir=tmp_path / "wd", auto_ports=True)
    t0 = time.monotonic()
    with caplog.at_level("WARNING"), pytest.raises(ServerStartError) as ei:
        server.start(ready_timeout=300)
    assert time.monotonic() - t0 < 90  # two starts of ~2 s + HANDSHAKE_S each, not the 300 s deadline
    e = ei.value
    assert e.reason == "stub_handshake", str(e)
    assert "did not take model 'ensemble' as loaded" in str(e) and "1 Python stub(s)" in str(e)
    retried = [r for r in caplog.records if "starting it again" in r.getMessage()]
    assert len(retried) == 1 and "stub_handshake" not in retried[0].getMessage()
    assert processes_mentioning(str(tmp_path)) == []


def test_initialized_not_loaded_reads_the_log():
    """The log lines behind the check above, as Triton 2.51 and sdtk's models write them."""
    from toolkit.server.logscan import initialized_not_loaded

    log = (
        'I1208 01:33:47.909862 1 python_be.cc:2249] "TRITONBACKEND_ModelInstanceInitialize: tensorrt_llm_bls_0_0 (CPU device 0)"\n'
        'I1208 01:33:47.909862 1 python_be.cc:2249] "TRITONBACKEND_ModelInstanceInitialize: tensorrt_llm_bls_0_1 (CPU device 0)"\n'
        'I1208 01:33:48.871171 1 python_be.cc:2249] "TRITONBACKEND_ModelInstanceInitialize: tensorrt_llm_0_0 (CPU device 0)"\n'
        "sdtk-serving: initialized instance 'tensorrt_llm_bls_0_0'\n"
        "sdtk-serving: initialized instance 'tensorrt_llm_0_0'\n"
    )
    assert initialized_not_loaded(log) == {"tensorrt_llm": 1}  # the BLS still has one instance to go
    log += "sdtk-serving: initialized instance 'tensorrt_llm_bls_0_1'\n"
    assert initialized_not_loaded(log) == {"tensorrt_llm": 1, "tensorrt_llm_bls": 2}
    log += "I1208 01:34:15.646237 1 model_lifecycle.cc:839] \"successfully loaded 'tensorrt_llm_bls'\"\n"
    assert initialized_not_loaded(log) == {"tensorrt_llm": 1}


@pytest.mark.slow  # over 5 s (pytest --durations on the 2-core box)
def test_unknown_model_name_fails_fast(make_repo, tmp_path):
    repo = make_repo({"ensemble": OK})
    server = TritonServer(repo, workdir=tmp_path / "wd", auto_ports=True, model_name="ensembel")
    t0 = time.monotonic()
    with pytest.raises(ServerStartError) as ei:
        server.start(ready_timeout=60)
    assert time.monotonic() - t0 < 30
    assert ei.value.reason == "missing_model"
    assert "'ensembel' is not in the model repository" in str(ei.value)
    assert "did you mean 'ensemble'" in ei.value.hint
    assert processes_mentioning(str(tmp_path)) == []


def test_early_exit_detected(make_repo, tmp_path):
    repo = make_repo({"ensemble": OK})
    server = TritonServer(
        ServerSite(repo, extra_args=("--no-such-flag=1",)), workdir=tmp_path / "wd", auto_ports=True
    )
    t0 = time.monotonic()
    with pytest.raises(ServerStartError) as ei:
        server.start(ready_timeout=120)
    assert time.monotonic() - t0 < 20  # found by poll(), not by the readiness deadline
    assert ei.value.reason == "exited" and ei.value.returncode != 0
    assert ei.value.errors == ["unrecognized option '--no-such-flag=1'"]
    assert "unrecognized option '--no-such-flag=1'" in str(ei.value)


def test_missing_model_repository(tmp_path):
    server = TritonServer(tmp_path / "nope", workdir=tmp_path / "wd", auto_ports=True)
    with pytest.raises(ServerError, match="does not exist"):
        server.start()
    assert server.pid is None


def test_readiness_timeout_reports_state(make_repo, tmp_path):
    repo = make_repo({"ensemble": OK})
    server = TritonServer(repo, workdir=tmp_path / "wd", auto_ports=True)
    with pytest.raises(ServerStartError) as ei:
        server.start(ready_timeout=0.3)  # far shorter than a Python model takes to load
    e = ei.value
    assert e.reason == "timeout" and "was not ready after 0s" in str(e)
    assert "live=False" in str(e) and "readiness timeout" in e.hint
    assert not server.running and processes_mentioning(str(tmp_path)) == []


def _consume_async(url: str, protocol: str, kill) -> None:
    async def main():
        async with AsyncTritonClient(url, protocol=protocol, timeout=15) as c:
            stream = await c.stream("slow words", max_tokens=400)
            first = await stream.__anext__()
            assert first.text == " slow"
            kill()
            async for _ in stream:
                pass

    asyncio.run(main())


@pytest.mark.parametrize(
    "protocol,use_async", [("http", False), ("grpc", False), ("http", True), ("grpc", True)]
)
def test_server_killed_mid_stream(make_repo, tmp_path, protocol, use_async):
    repo = make_repo({"ensemble": dict(OK, token_delay_ms=50)})
    with TritonServer(repo, workdir=tmp_path / "wd", auto_ports=True, ready_timeout=60) as server:
        url = server.http_url if protocol == "http" else server.grpc_url
        killer = threading.Timer(0.2, os.kill, (server.pid, signal.SIGKILL))
        t0 = time.monotonic()
        with pytest.raises(ClientError) as ei:
            if use_async:
                _consume_async(url, protocol, killer.start)
            else:
                with TritonClient(url, protocol=protocol, timeout=15) as client:
                    stream = client.stream("slow words", max_tokens=400)  # ~20 s if left alone
                    assert next(stream).text == " slow"
                    killer.start()
                    for _ in stream:
                        pass
        elapsed = time.monotonic() - t0
        killer.join()
        assert elapsed < 10, f"client took {elapsed:.1f}s to notice"
        assert isinstance(ei.value, ConnectionLost), repr(ei.value)
        assert "sdtk status" in ei.value.hint
    # The context manager killed what the SIGKILL left behind (Python backend stubs).
    assert processes_mentioning(str(tmp_path)) == []
    assert procs.group_members(server.pid) == []


@pytest.mark.slow  # over 5 s (pytest --durations on the 2-core box)
def test_two_servers_side_by_side(make_repo, tmp_path):
    repo = make_repo({"ensemble": OK})
    with (
        TritonServer(repo, workdir=tmp_path / "a", auto_ports=True, ready_timeout=60) as a,
        TritonServer(repo, workdir=tmp_path / "b", auto_ports=True, ready_timeout=60) as b,
    ):
        assert a.shm_prefix != b.shm_prefix and a.ports != b.ports
        for s in (a, b):
            # Close clients: Triton waits (up to --exit-timeout-secs) for open HTTP connections.
            with TritonClient(s.http_url) as c:
                assert c.generate("x y", max_tokens=2).text == " x y"
    assert processes_mentioning(str(tmp_path)) == []


@pytest.mark.slow  # over 5 s (pytest --durations on the 2-core box)
def test_auto_ports_pick_again_after_a_race(make_repo, tmp_path, monkeypatch):
    import toolkit.server.launch as launch

    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    taken = holder.getsockname()[1]
    real = launch.auto_ports
    picks = []

    def racy(host):
        picks.append(host)
        if len(picks) == 1:
            return launch.Ports(http=taken, grpc=free_ports(1)[0], metrics=free_ports(1)[0])
        return real(host)

    monkeypatch.setattr(launch, "auto_ports", racy)
    repo = make_repo({"ensemble": OK})
    try:
        with TritonServer(repo, workdir=tmp_path / "wd", auto_ports=True, ready_timeout=60) as s:
            assert len(picks) == 2 and s.ports.http != taken and s.health().ok
    finally:
        holder.close()


def test_python_env_directory_found_if_unambiguous_removed_if_empty(tmp_path, monkeypatch):
    """The Python backend's /tmp/python_env_* directory (pointed here at tmp_path): a launch
    records it when exactly one appeared, and a stop removes it only if it is empty."""
    from toolkit.server import state

    monkeypatch.setattr(state, "PYTHON_ENV_DIR", tmp_path)
    (tmp_path / "python_env_old").mkdir()
    before = state.python_env_dirs()
    assert before == {str(tmp_path / "python_env_old")}
    assert state.new_python_env(before) == ""  # none yet
    (tmp_path / "python_env_ours").mkdir()
    (tmp_path / "unrelated").mkdir()
    assert state.new_python_env(before) == str(tmp_path / "python_env_ours")
    (tmp_path / "python_env_another_server").mkdir()
    assert state.new_python_env(before) == ""  # two servers started: whose is whose is unknown
    assert state.remove_python_env(str(tmp_path / "python_env_ours"))
    assert not (tmp_path / "python_env_ours").exists()
    (tmp_path / "python_env_old" / "extracted").write_text("x")  # an EXECUTION_ENV_PATH model's
    assert not state.remove_python_env(str(tmp_path / "python_env_old"))
    assert (tmp_path / "python_env_old" / "extracted").exists()
    assert not state.remove_python_env(str(tmp_path / "unrelated"))  # not the backend's
    assert not state.remove_python_env("") and (tmp_path / "unrelated").is_dir()


def test_failed_start_claims_its_python_env_directory_only_when_no_server_runs(tmp_path, monkeypatch):
    """A start that failed before READY: its server's directory is the one made since the launch,
    but only while no tritonserver runs (one started meanwhile may own it; removing a live
    server's directory would fail that server's finalize)."""
    from toolkit.server import state

    monkeypatch.setattr(state, "PYTHON_ENV_DIR", tmp_path)
    before = state.python_env_dirs()
    (tmp_path / "python_env_failed").mkdir()
    running: list[int] = [4242]
    monkeypatch.setattr(
        state.procs, "find_processes", lambda needle: running if needle == "tritonserver" else []
    )
    assert state.unclaimed_python_env(before) == ""  # another server runs: leave it
    running.clear()
    assert state.unclaimed_python_env(before) == str(tmp_path / "python_env_failed")
    (tmp_path / "python_env_second").mkdir()
    assert state.unclaimed_python_env(before) == ""  # two: whose is whose is unknown
