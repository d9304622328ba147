"""Launch configuration without running a server: embedded layout, env, argv, recipe wiring."""

from __future__ import annotations

import os
import sys
import sysconfig

import pytest

from toolkit.errors import ToolNotFound
from toolkit.recipe import Serving
from toolkit.server.discover import choose_tritonserver, pytriton_root
from toolkit.server.embedded import STUB, embedded_env, is_embedded, prepare_embedded
from toolkit.server.launch import ServerSite, TritonServer, connect_host
from toolkit.server.plan import LaunchPlan

needs_pytriton = pytest.mark.skipif(pytriton_root() is None, reason="nvidia-pytriton not installed")


@needs_pytriton
def test_prepare_embedded_layout_and_env(tmp_path):
    root = pytriton_root()
    setup = prepare_embedded(tmp_path, base_env={"PATH": "/usr/bin", "LD_LIBRARY_PATH": "/old"})
    py = setup.backend_dir / "python"
    assert setup.backend_dir == tmp_path / "triton_backends"
    assert (py / "libtriton_python.so").is_file() and (py / "triton_python_backend_utils.py").is_file()
    stub = py / STUB
    minor = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert stub.read_bytes() == (root / "python_backend_stubs" / minor / STUB).read_bytes()
    assert os.access(stub, os.X_OK)
    ld = setup.env["LD_LIBRARY_PATH"].split(os.pathsep)
    assert ld == [
        sysconfig.get_config_var("LIBDIR"),
        str(root.parent.parent / "nvidia_pytriton.libs"),
        "/old",
    ]
    assert setup.env["PATH"].split(os.pathsep)[0] == os.path.dirname(sys.executable)
    # A second call reuses the files (a running server may have them mapped).
    ino = stub.stat().st_ino
    prepare_embedded(tmp_path)
    assert stub.stat().st_ino == ino


@needs_pytriton
def test_embedded_detection_and_choice(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    c = choose_tritonserver()
    assert c.source == "embedded" and is_embedded(c.path)
    assert not is_embedded("/opt/tritonserver/bin/tritonserver")
    with pytest.raises(ToolNotFound, match="/nope/tritonserver") as ei:
        choose_tritonserver("/nope/tritonserver")
    assert "--tritonserver" in ei.value.hint
    env = embedded_env({"PATH": "/a"})
    assert env["PATH"].endswith(os.pathsep + "/a")


@needs_pytriton
def test_command_from_recipe_serving(tmp_path, monkeypatch):
    monkeypatch.delenv("SDTK_EXIT_TIMEOUT_S")  # the default (tests/conftest.py sets 3 s)
    serving = Serving(
        host="0.0.0.0", http_port=9000, grpc_port=9001, metrics_port=9002, model_name="ensemble"
    )
    s = TritonServer.from_serving(serving, tmp_path / "repo", workdir=tmp_path / "wd", log_verbose=1)
    argv = s.command()
    assert argv[0].endswith("tritonserver")
    for flag in (
        f"--model-repository={tmp_path / 'repo'}",
        "--http-port=9000",
        "--grpc-port=9001",
        "--metrics-port=9002",
        "--http-address=0.0.0.0",
        "--grpc-address=0.0.0.0",
        f"--backend-directory={tmp_path / 'wd' / 'triton_backends'}",
        "--log-verbose=1",
        "--exit-timeout-secs=10",
    ):
        assert flag in argv
    prefix = [a for a in argv if "shm-region-prefix-name" in a]
    assert len(prefix) == 1 and prefix[0].startswith("--backend-config=python,shm-region-prefix-name=sdtk")
    assert s.http_url == "http://127.0.0.1:9000" and s.grpc_url == "127.0.0.1:9001"
    assert s.metrics_url == "http://127.0.0.1:9002/metrics"
    assert not (tmp_path / "wd").exists()  # rendering has no side effects
    monkeypatch.setenv("SDTK_EXIT_TIMEOUT_S", "3")
    short = TritonServer.from_serving(serving, tmp_path / "repo", workdir=tmp_path / "wd").command()
    assert "--exit-timeout-secs=3" in short and "--exit-timeout-secs=10" not in short
    # Two handles never share a Python-backend shm prefix.
    other = TritonServer.from_serving(serving, tmp_path / "repo", workdir=tmp_path / "wd")
    assert other.shm_prefix != s.shm_prefix


@needs_pytriton
def test_multi_gpu_command_is_mpirun(tmp_path):
    s = TritonServer(tmp_path, workdir=tmp_path / "wd", plan=LaunchPlan(ranks=2))
    argv = s.command()
    assert argv[:2] == ["mpirun", "--allow-run-as-root"] and argv.count(":") == 1
    assert "--load-model=tensorrt_llm" in argv


@needs_pytriton
def test_spec_round_trips_the_launch_plan(tmp_path):
    """The watchdog of a detached deploy relaunches from launch.json through spec / from_spec."""
    import json

    plan = LaunchPlan(multi_model=True, backend="engine", gpu_ids={"target": (0, 1), "draft": (0,)},
                      num_gpus=2, memory_pools=(0, 1), container_version="25.12")  # fmt: skip
    s = TritonServer(ServerSite(tmp_path, http_port=9100, log_verbose=1), plan, workdir=tmp_path / "wd")
    again = TritonServer.from_spec(json.loads(json.dumps(s.spec())))
    again.shm_prefix = s.shm_prefix
    assert again.plan == plan and again.command() == s.command()
    assert again.plan.env["TRTLLM_ORCHESTRATOR"] == "1"


def test_connect_host():
    assert connect_host("0.0.0.0") == "127.0.0.1"
    assert connect_host("::") == "[::1]"
    assert connect_host("fe80::1") == "[fe80::1]"
    assert connect_host("10.0.0.5") == "10.0.0.5"


@needs_pytriton
def test_a_spec_from_before_the_plan_still_relaunches(tmp_path, monkeypatch):
    """A watchdog's launch.json written before LaunchPlan held the launch facts as loose keys."""
    monkeypatch.setenv("NVIDIA_TRITON_SERVER_VERSION", "25.12")
    plan = LaunchPlan(multi_model=True, num_gpus=2, memory_pools=(0, 1), container_version="25.12")
    s = TritonServer(tmp_path, workdir=tmp_path / "wd", plan=plan)
    old = {k: v for k, v in s.spec().items() if k != "plan"} | {
        "world_size": 1,
        "tensorrt_llm_model_names": ["tensorrt_llm", "tensorrt_llm_draft"],
        "multi_model": True,
        "spawn_processes": True,
        "num_gpus": 2,
        "triton_container_version": None,
    }
    again = TritonServer.from_spec(old)
    again.shm_prefix = s.shm_prefix
    assert again.command() == s.command() and again.plan.env == plan.env
