"""mpirun leader-mode / orchestrator commands, against the reference's description of
launch_triton_server.py (/work/shared/reference/triton-trtllm-backend.md §3)."""

from __future__ import annotations

import pytest

from toolkit.errors import UsageError
from toolkit.server.mpi import mpirun_argv, multi_gpu_plan, orchestrator_env


def _ranks(argv: list[str]) -> list[list[str]]:
    assert argv[:2] == ["mpirun", "--allow-run-as-root"]
    ranks, cur = [], []
    for a in argv[2:]:
        if a == ":":
            ranks.append(cur)
            cur = []
        else:
            cur.append(a)
    return [*ranks, cur]


def test_two_ranks_exact_argv():
    argv = mpirun_argv(
        "/opt/tritonserver/bin/tritonserver",
        "/repo",
        2,
        http_port=8000,
        grpc_port=8001,
        metrics_port=8002,
        tensorrt_llm_model_names=["tensorrt_llm", "tensorrt_llm_draft"],
        log_file="triton_log.txt",
        triton_container_version="",
    )
    ts = "/opt/tritonserver/bin/tritonserver"
    assert argv == [
        "mpirun", "--allow-run-as-root",
        "-n", "1", ts, "--model-repository=/repo",
        "--grpc-port=8001", "--http-port=8000", "--metrics-port=8002",
        "--log-verbose=3", "--log-file=triton_log.txt",
        "--disable-auto-complete-config", "--backend-config=python,shm-region-prefix-name=prefix0_",
        ":",
        "-n", "1", ts, "--model-repository=/repo",
        "--model-control-mode=explicit", "--load-model=tensorrt_llm", "--load-model=tensorrt_llm_draft",
        "--disable-auto-complete-config", "--backend-config=python,shm-region-prefix-name=prefix1_",
    ]  # fmt: skip


@pytest.mark.parametrize("world_size", [2, 4])
def test_rank_structure(world_size):
    ranks = _ranks(mpirun_argv("tritonserver", "/r", world_size, http_port=9000, oversubscribe=False))
    assert len(ranks) == world_size
    for i, rank in enumerate(ranks):
        assert rank[:4] == ["-n", "1", "tritonserver", "--model-repository=/r"]
        assert rank[-2:] == [
            "--disable-auto-complete-config",
            f"--backend-config=python,shm-region-prefix-name=prefix{i}_",
        ]
        port_flags = [a for a in rank if a.split("=")[0] in ("--http-port", "--grpc-port", "--metrics-port")]
        if i == 0:
            # Once each, on rank 0 only (upstream repeats them on every rank: #455).
            assert sorted(port_flags) == ["--grpc-port=8001", "--http-port=9000", "--metrics-port=8002"]
            assert "--model-control-mode=explicit" not in rank
        else:
            assert port_flags == []
            assert "--model-control-mode=explicit" in rank
            assert "--load-model=tensorrt_llm" in rank
            assert not any(a.startswith("--log-file") for a in rank)


def test_options():
    argv = mpirun_argv(
        "ts", "/r", 2, oversubscribe=True, exit_timeout_s=7, host="127.0.0.1", shm_prefix="dep_",
        backend_directory="/b",
    )  # fmt: skip
    assert argv[2] == "--oversubscribe"
    r0, r1 = _ranks(argv)
    assert "--exit-timeout-secs=7" in r0 and "--exit-timeout-secs=7" in r1
    assert "--http-address=127.0.0.1" in r0 and "--grpc-address=127.0.0.1" in r0
    assert not any("address" in a for a in r1)
    assert r1[-1] == "--backend-config=python,shm-region-prefix-name=dep_1_"
    assert "--backend-directory=/b" in r1


def test_orchestrator_plan():
    assert orchestrator_env() == {"TRTLLM_ORCHESTRATOR": "1", "TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES": "1"}
    assert orchestrator_env(False)["TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES"] == "0"
    plan = multi_gpu_plan("ts", "/r", 1, multi_model=True, num_gpus=2, triton_container_version="24.07")
    assert plan.env == orchestrator_env(True)
    (r0,) = _ranks(plan.argv)
    for flag in (
        "--pinned-memory-pool-byte-size=0",
        "--enable-peer-access=false",
        "--cuda-memory-pool-byte-size=0:0",
        "--cuda-memory-pool-byte-size=1:0",
    ):
        assert flag in r0
    old = multi_gpu_plan("ts", "/r", 1, multi_model=True, triton_container_version="24.05")
    assert "--enable-peer-access=false" not in old.argv
    assert "TRTLLM_ORCHESTRATOR=1" in plan.shell()
    # Without spawning, ranks are pre-launched by mpirun: several ranks are fine.
    pre = multi_gpu_plan("ts", "/r", 3, multi_model=True, spawn_processes=False)
    assert len(_ranks(pre.argv)) == 3 and pre.env["TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES"] == "0"


def test_rejects_bad_combinations():
    with pytest.raises(UsageError):
        mpirun_argv("ts", "/r", 0)
    with pytest.raises(UsageError, match="world_size 1"):
        mpirun_argv("ts", "/r", 2, multi_model=True)
    with pytest.raises(UsageError):
        mpirun_argv("ts", "/r", 2, tensorrt_llm_model_names=[])
