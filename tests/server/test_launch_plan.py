"""The launch plan's one argv builder (toolkit.server.plan): mpirun leader-mode / orchestrator
commands, against upstream's launch_triton_server.py (triton-inference-server/tensorrtllm_backend
scripts/launch_triton_server.py @c2e65b8; newer in NVIDIA/TensorRT-LLM triton_backend/ @0a2e2c1)."""

from __future__ import annotations

import pytest

from toolkit.errors import UsageError
from toolkit.server.plan import LaunchPlan, LaunchSite, orchestrator_env


def mpirun_argv(tritonserver, model_repo, world_size, *, names=("tensorrt_llm",), mpi_args=(), **site):
    return LaunchPlan(ranks=world_size, model_names=tuple(names)).argv(
        LaunchSite(str(tritonserver), str(model_repo), mpi_args=tuple(mpi_args), **site)
    )


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
        names=["tensorrt_llm", "tensorrt_llm_draft"],
    )
    ts = "/opt/tritonserver/bin/tritonserver"
    assert argv == [
        "mpirun", "--allow-run-as-root",
        "-n", "1", ts, "--model-repository=/repo",
        "--grpc-port=8001", "--http-port=8000", "--metrics-port=8002",
        "--disable-auto-complete-config", "--backend-config=python,shm-region-prefix-name=prefix0_",
        ":",
        "-n", "1", ts, "--model-repository=/repo",
        "--model-control-mode=explicit", "--load-model=tensorrt_llm", "--load-model=tensorrt_llm_draft",
        "--disable-auto-complete-config", "--backend-config=python,shm-region-prefix-name=prefix1_",
    ]  # fmt: skip


@pytest.mark.parametrize("world_size", [2, 4])
def test_rank_structure(world_size):
    ranks = _ranks(mpirun_argv("tritonserver", "/r", world_size, http_port=9000))
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
            assert not any(a.startswith("--log-verbose") for a in rank)


def test_options():
    argv = mpirun_argv(
        "ts", "/r", 2, mpi_args=["--oversubscribe"], exit_timeout_s=7, host="127.0.0.1", shm_prefix="dep_",
        backend_directory="/b", log_verbose=2, extra_args=("--exit-on-error=false",),
    )  # fmt: skip
    assert argv[2] == "--oversubscribe"
    r0, r1 = _ranks(argv)
    assert "--exit-timeout-secs=7" in r0 and "--exit-timeout-secs=7" in r1
    assert "--http-address=127.0.0.1" in r0 and "--grpc-address=127.0.0.1" in r0
    assert not any("address" in a for a in r1)
    assert r1[-1] == "--backend-config=python,shm-region-prefix-name=dep_1_"
    assert "--backend-directory=/b" in r1
    assert r0[-2:] == ["--log-verbose=2", "--exit-on-error=false"]  # rank 0's last arguments only
    assert not any(a.startswith("--log-verbose") or a.startswith("--exit-on") for a in r1)


def test_orchestrator_plan():
    assert orchestrator_env() == {"TRTLLM_ORCHESTRATOR": "1", "TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES": "1"}
    assert orchestrator_env(False)["TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES"] == "0"
    site = LaunchSite("ts", "/r")
    plan = LaunchPlan(multi_model=True, num_gpus=2, memory_pools=(0, 1))
    assert plan.env == orchestrator_env(True)
    (r0,) = _ranks(plan.argv(site))
    for flag in (
        "--pinned-memory-pool-byte-size=0",
        "--enable-peer-access=false",
        "--cuda-memory-pool-byte-size=0:0",
        "--cuda-memory-pool-byte-size=1:0",
    ):
        assert flag in r0
    no_pools = LaunchPlan(multi_model=True)
    assert "--enable-peer-access=false" not in no_pools.argv(site)
    assert plan.shell(site).startswith("TRTLLM_ORCHESTRATOR=1 TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES=1 mpirun ")
    # Without spawning, ranks are pre-launched by mpirun: several ranks are fine.
    pre = LaunchPlan(ranks=3, multi_model=True, spawn_processes=False)
    assert len(_ranks(pre.argv(site))) == 3 and pre.env["TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES"] == "0"


@pytest.mark.parametrize(
    ("container", "pools"), [("24.07", (0, 1, 2, 3)), ("24.06", ()), ("", ()), ("not-a-version", ())]
)
def test_plan_decides_the_pools_from_the_container(monkeypatch, container, pools):
    """launch_triton_server.py adds the pool flags only in containers newer than 24.06, one per GPU."""
    from tests.repo.conftest import make_recipe
    from toolkit.server.plan import plan_launch

    monkeypatch.setenv("NVIDIA_TRITON_SERVER_VERSION", container)
    recipe = make_recipe(
        "engine", "draft_target", serving={"decoupled": False}, parallel={"tp": 4, "draft_tp": 1}
    )
    plan = plan_launch(recipe, "engine")
    assert (plan.ranks, plan.multi_model, plan.num_gpus) == (1, True, 4)
    assert plan.gpu_ids == {"target": (0, 1, 2, 3), "draft": (0,)}
    assert plan.model_names == ("tensorrt_llm", "tensorrt_llm_draft")
    assert plan.memory_pools == (pools if container else (0, 1, 2, 3))  # "": the image table's 25.12


def test_plan_round_trips_through_a_dict():
    plan = LaunchPlan(ranks=1, multi_model=True, backend="engine", gpu_ids={"target": (0, 1), "draft": (2,)},
                      num_gpus=3, memory_pools=(0, 1, 2), container_version="25.12")  # fmt: skip
    assert LaunchPlan.from_dict(plan.to_dict()) == plan


def test_single_process_argv():
    """One tritonserver: ports, then the site's flags in a fixed order."""
    site = LaunchSite("ts", "/r", host="0.0.0.0", shm_prefix="sdtk", exit_timeout_s=30)
    assert LaunchPlan().argv(site) == [
        "ts", "--model-repository=/r", "--http-port=8000", "--grpc-port=8001", "--metrics-port=8002",
        "--http-address=0.0.0.0", "--grpc-address=0.0.0.0", "--metrics-address=0.0.0.0",
        "--backend-config=python,shm-region-prefix-name=sdtk0_", "--exit-timeout-secs=30",
    ]  # fmt: skip
    bare = LaunchSite("ts", "/r", shm_prefix=None)
    assert LaunchPlan().argv(bare) == [
        "ts", "--model-repository=/r", "--http-port=8000", "--grpc-port=8001", "--metrics-port=8002",
    ]  # fmt: skip


def test_rejects_bad_combinations():
    with pytest.raises(UsageError):
        LaunchPlan(ranks=0)
    with pytest.raises(UsageError, match="world_size 1"):
        LaunchPlan(ranks=2, multi_model=True)
    with pytest.raises(UsageError):
        LaunchPlan(ranks=2, model_names=())
