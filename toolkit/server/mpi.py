"""Multi-GPU launch commands, as TensorRT-LLM's `scripts/launch_triton_server.py` builds them.

Leader mode (world_size > 1): one tritonserver per rank under one `mpirun`:

    mpirun --allow-run-as-root [--oversubscribe]
      -n 1 tritonserver --model-repository=R --grpc-port=G --http-port=H --metrics-port=M
           [--log-verbose=3 --log-file=F] --disable-auto-complete-config
           --backend-config=python,shm-region-prefix-name=prefix0_ :
      -n 1 tritonserver --model-repository=R --model-control-mode=explicit
           --load-model=tensorrt_llm [--load-model=...] --disable-auto-complete-config
           --backend-config=python,shm-region-prefix-name=prefix1_ : ...

Orchestrator mode (`--multi-model`, needed for draft-target with several TRT-LLM models): the
same command plus TRTLLM_ORCHESTRATOR=1 and TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES in the env.

Render-only here: nothing in this module runs mpirun.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from toolkit.errors import UsageError


@dataclass(frozen=True)
class LaunchPlan:
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)  # to add to the launching environment

    def shell(self) -> str:
        import shlex

        prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        return (prefix + " " if prefix else "") + shlex.join(self.argv)


def _newer_than(version: str | None, floor: str) -> bool:
    from packaging.version import InvalidVersion, Version

    if not version:
        return False
    try:
        return Version(version) > Version(floor)
    except InvalidVersion:
        return False


def container_version(trtllm_version: str | None = None) -> str | None:
    """The Triton container version (yy.mm) launch_triton_server.py compares with 24.06:
    $NVIDIA_TRITON_SERVER_VERSION inside the container, else the NGC container that carries
    `trtllm_version` (toolkit/ops/images.py), so that a dry run shows what the container runs."""
    env = os.environ.get("NVIDIA_TRITON_SERVER_VERSION")
    if env:
        return env
    from packaging.version import InvalidVersion, Version

    from toolkit.ops import images

    version = trtllm_version or images.DEFAULT_TRTLLM
    try:
        v = Version(version)
    except InvalidVersion:
        return None
    return images.TRTLLM_TO_CONTAINER.get(f"{v.major}.{v.minor}.{v.micro}")


def orchestrator_env(spawn_processes: bool = True) -> dict[str, str]:
    """The env `launch_triton_server.py --multi-model [--disable-spawn-processes]` sets."""
    return {
        "TRTLLM_ORCHESTRATOR": "1",
        "TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES": "1" if spawn_processes else "0",
    }


def mpirun_argv(
    tritonserver: Path | str,
    model_repo: Path | str,
    world_size: int,
    *,
    http_port: int = 8000,
    grpc_port: int = 8001,
    metrics_port: int = 8002,
    host: str | None = None,
    tensorrt_llm_model_names: Sequence[str] = ("tensorrt_llm",),
    log_file: Path | str | None = None,
    log_verbose: int = 3,
    oversubscribe: bool = False,
    exit_timeout_s: int | None = None,
    backend_directory: Path | str | None = None,
    shm_prefix: str = "prefix",
    multi_model: bool = False,
    spawn_processes: bool = True,
    num_gpus: int | None = None,
    triton_container_version: str | None = None,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The argv upstream's launcher passes to Popen, with two deliberate differences:

    - Ports (and the bind address, when `host` is given) go to rank 0 only. Upstream adds the
      three port flags twice to *every* rank (tensorrtllm_backend#455). Ranks > 0 never leave
      TRITONBACKEND_ModelInstanceInitialize, so they never bind a port; giving them ports only
      invites "already in use" confusion when someone changes the launch.
    - Ranks are separated by `:` with no trailing `:` after the last rank.

    `extra_args` are appended to rank 0 only (e.g. --exit-on-error=false).
    """
    if world_size < 1:
        raise UsageError(f"world_size must be >= 1, got {world_size}")
    names = [n for n in tensorrt_llm_model_names if n]
    if world_size > 1 and not names:
        raise UsageError("leader mode needs the tensorrt_llm model name(s) for ranks > 0")
    if multi_model and spawn_processes and world_size != 1:
        raise UsageError(
            "orchestrator mode with spawned processes runs one tritonserver (world_size 1); "
            "the workers are spawned by TRT-LLM. Use spawn_processes=False for leader-style ranks"
        )
    if triton_container_version is None:
        triton_container_version = os.environ.get("NVIDIA_TRITON_SERVER_VERSION")

    argv = ["mpirun", "--allow-run-as-root"]
    if oversubscribe:
        argv.append("--oversubscribe")
    for rank in range(world_size):
        if rank > 0:
            argv.append(":")
        argv += ["-n", "1", str(tritonserver), f"--model-repository={model_repo}"]
        if exit_timeout_s is not None:
            argv.append(f"--exit-timeout-secs={exit_timeout_s}")
        if rank == 0:
            argv += [f"--grpc-port={grpc_port}", f"--http-port={http_port}", f"--metrics-port={metrics_port}"]
            if host:
                argv += [f"--http-address={host}", f"--grpc-address={host}", f"--metrics-address={host}"]
            if log_file is not None:
                argv += [f"--log-verbose={log_verbose}", f"--log-file={log_file}"]
        else:
            argv.append("--model-control-mode=explicit")
            argv += [f"--load-model={n}" for n in names]
        if multi_model and spawn_processes and _newer_than(triton_container_version, "24.06"):
            # launch_triton_server.py add_multi_model_config (tensorrtllm_backend v0.19.0): one pool
            # per GPU of the node (it counts `nvidia-smi --list-gpus`; we count the deployment's GPUs).
            argv += ["--pinned-memory-pool-byte-size=0", "--enable-peer-access=false"]
            argv += [f"--cuda-memory-pool-byte-size={j}:0" for j in range(num_gpus or 1)]
        if backend_directory is not None:
            argv.append(f"--backend-directory={backend_directory}")
        argv += [
            "--disable-auto-complete-config",
            f"--backend-config=python,shm-region-prefix-name={shm_prefix}{rank}_",
        ]
        if rank == 0:
            argv += list(extra_args)
    return argv


def multi_gpu_plan(
    tritonserver: Path | str,
    model_repo: Path | str,
    world_size: int,
    *,
    multi_model: bool = False,
    spawn_processes: bool = True,
    **kwargs,
) -> LaunchPlan:
    """argv + env for a multi-rank (or orchestrator-mode) deployment; see `mpirun_argv`."""
    argv = mpirun_argv(
        tritonserver,
        model_repo,
        world_size,
        multi_model=multi_model,
        spawn_processes=spawn_processes,
        **kwargs,
    )
    env = orchestrator_env(spawn_processes) if multi_model else {}
    return LaunchPlan(argv, env)
