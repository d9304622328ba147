"""The launch plan: how a rendered repository is launched, worked out once.

    plan = plan_launch(recipe, "engine", engine_world_size=4)     # the facts
    argv = plan.argv(LaunchSite(tritonserver=exe, model_repo=repo))  # the one argv builder
    env = plan.env                                                 # added to the environment

A `LaunchPlan` holds the facts of a deployment: ranks (tritonserver processes), orchestrator mode,
the TRT-LLM models that ranks > 0 load, the GPU ids of each model, the CUDA memory pools and the
environment. A `LaunchSite` holds only what differs between the places that launch it: the
binary and repository paths, ports and bind address, the Python-backend shm prefix, and the
few flags a site adds (exit timeout, backend directory, model control). Every consumer reads the
plan and describes its site: the local `TritonServer` (toolkit.server.launch), a Kubernetes pod
and a Slurm node (toolkit.ops.layout), RUNBOOK.md (toolkit.repo.runbook), `sdtk deploy --dry-run`
(toolkit.deploy.plan_deploy). tests/repo/test_launch_facts.py checks that they agree.

It lives in toolkit.server, the lowest layer that launches: repo, ops and deploy sit above it.

Leader mode (ranks > 1) is the argv TensorRT-LLM's `scripts/launch_triton_server.py` builds:

    mpirun --allow-run-as-root [mpi args]
      -n 1 tritonserver --model-repository=R --grpc-port=G --http-port=H --metrics-port=M
           --disable-auto-complete-config --backend-config=python,shm-region-prefix-name=prefix0_ :
      -n 1 tritonserver --model-repository=R --model-control-mode=explicit
           --load-model=tensorrt_llm [--load-model=...] --disable-auto-complete-config
           --backend-config=python,shm-region-prefix-name=prefix1_ : ...

with two deliberate differences: ports (and the bind address) go to rank 0 only (upstream adds
them to every rank, tensorrtllm_backend#455; ranks > 0 never bind a port), and no trailing `:`.
Orchestrator mode (`--multi-model`, engine draft-target) is the same command with one rank, plus
TRTLLM_ORCHESTRATOR=1 and TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES in the env.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from toolkit import modes
from toolkit.errors import UsageError

if TYPE_CHECKING:
    from toolkit.recipe import Recipe

# launch_triton_server.py adds the memory-pool flags of orchestrator mode in containers newer than this.
POOL_CONTAINER_FLOOR = "24.06"


@dataclass(frozen=True)
class LaunchSite:
    """Where one launch runs: what may differ between the local launch, a pod, a Slurm node and
    the runbook. The facts (ranks, models, pools, env) are the plan's."""

    tritonserver: str
    model_repo: str
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    host: str | None = None  # bind address of rank 0; None: Triton's default (every interface)
    # Python-backend shm region prefix: rank r's is f"{shm_prefix}{r}_"; None: no flag at all.
    shm_prefix: str | None = "prefix"
    number_single_rank: bool = True  # one tritonserver: f"{shm_prefix}0_" (False: shm_prefix as is)
    exit_timeout_s: int | None = None
    backend_directory: str | None = None
    log_verbose: int = 0
    disable_auto_complete_config: bool = False  # one tritonserver (leader mode always sets it)
    model_control: tuple[str, ...] = ()  # one tritonserver: explicit model control (toolkit.server.launch)
    extra_args: tuple[str, ...] = ()  # rank 0's last arguments
    mpi_args: tuple[str, ...] = ()  # to mpirun itself: --oversubscribe, --host h:n,..., an rsh agent


@dataclass(frozen=True)
class LaunchPlan:
    """The facts of one launch (see the module docstring); `argv(site)` is the one argv builder."""

    ranks: int = 1  # tritonserver processes under one mpirun
    multi_model: bool = False  # orchestrator mode (TRTLLM_ORCHESTRATOR=1, `--multi-model`)
    model_names: tuple[str, ...] = ("tensorrt_llm",)  # the TRT-LLM models ranks > 0 load explicitly
    backend: str = ""  # engine | llmapi | reference ("" when built by hand)
    gpu_ids: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # per model role
    num_gpus: int = 0  # GPUs the deployment uses (0: CPU)
    memory_pools: tuple[int, ...] = ()  # GPUs given a --cuda-memory-pool-byte-size (orchestrator mode)
    spawn_processes: bool = True  # orchestrator mode: TRT-LLM spawns the workers
    container_version: str | None = None  # the Triton container (yy.mm) the pools were decided for

    def __post_init__(self) -> None:
        if self.ranks < 1:
            raise UsageError(f"world_size must be >= 1, got {self.ranks}")
        if self.ranks > 1 and not [n for n in self.model_names if n]:
            raise UsageError("leader mode needs the tensorrt_llm model name(s) for ranks > 0")
        if self.multi_model and self.spawn_processes and self.ranks != 1:
            raise UsageError(
                "orchestrator mode with spawned processes runs one tritonserver (world_size 1); "
                "the workers are spawned by TRT-LLM. Use spawn_processes=False for leader-style ranks"
            )

    @property
    def mpirun(self) -> bool:
        """Launched through `mpirun` (several ranks, or orchestrator mode)."""
        return self.ranks > 1 or self.multi_model

    @property
    def env(self) -> dict[str, str]:
        """What the launch adds to the environment."""
        return orchestrator_env(self.spawn_processes) if self.multi_model else {}

    def argv(self, site: LaunchSite) -> list[str]:
        return launch_argv(self, site)

    def shell(self, site: LaunchSite) -> str:
        """The launch as one shell line: env assignments, then the argv."""
        return shell_line(self.env, self.argv(site))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["model_names"] = list(self.model_names)
        d["gpu_ids"] = {k: list(v) for k, v in self.gpu_ids.items()}
        d["memory_pools"] = list(self.memory_pools)
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LaunchPlan:
        d = dict(data)
        d["model_names"] = tuple(d.get("model_names", ("tensorrt_llm",)))
        d["gpu_ids"] = {k: tuple(v) for k, v in (d.get("gpu_ids") or {}).items()}
        d["memory_pools"] = tuple(d.get("memory_pools", ()))
        return cls(**d)

    @classmethod
    def spec_values(cls, spec: Mapping[str, Any]) -> dict[str, Any]:
        """A `TritonServer.spec()` with its plan as a LaunchPlan. A spec written before the plan
        existed (a watchdog's launch.json) held the plan's facts as loose keys: they become one."""
        values = dict(spec)
        legacy = {k: values.pop(k) for k in _LEGACY_SPEC_KEYS if k in values}
        if "plan" in values or not legacy:
            values["plan"] = cls.from_dict(values.get("plan") or {})
            return values
        multi, spawn = bool(legacy.get("multi_model")), bool(legacy.get("spawn_processes", True))
        version = legacy.get("triton_container_version") or os.environ.get("NVIDIA_TRITON_SERVER_VERSION")
        pools = multi and spawn and newer_than(version, POOL_CONTAINER_FLOOR)
        values["plan"] = cls(
            ranks=int(legacy.get("world_size", 1)),
            multi_model=multi,
            model_names=tuple(legacy.get("tensorrt_llm_model_names", ("tensorrt_llm",))),
            num_gpus=int(legacy.get("num_gpus") or 0),
            memory_pools=tuple(range(legacy.get("num_gpus") or 1)) if pools else (),
            spawn_processes=spawn,
            container_version=version,
        )
        return values


_LEGACY_SPEC_KEYS = (
    "world_size",
    "tensorrt_llm_model_names",
    "multi_model",
    "spawn_processes",
    "num_gpus",
    "triton_container_version",
)


def orchestrator_env(spawn_processes: bool = True) -> dict[str, str]:
    """The env `launch_triton_server.py --multi-model [--disable-spawn-processes]` sets."""
    return {
        "TRTLLM_ORCHESTRATOR": "1",
        "TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES": "1" if spawn_processes else "0",
    }


def shell_line(env: Mapping[str, str], argv: list[str]) -> str:
    prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))
    return (prefix + " " if prefix else "") + shlex.join(argv)


def launch_ranks(backend: str, mode: str, engine_world_size: int) -> int:
    """tritonserver ranks to launch.

    - llmapi: 1. Upstream launches one tritonserver (`launch_triton_server.py --model_repo=llmapi_repo/`,
      tensorrtllm_backend docs/llmapi.md), and the llmapi model.py clears `OMPI_COMM_WORLD_*` at import
      (TensorRT-LLM triton_backend/all_models/llmapi/tensorrt_llm/1/model.py @044a90d): the LLM API
      spawns its own TP/PP workers.
    - engine draft-target: 1, orchestrator mode: `launch_triton_server.py --multi-model --world_size=1`
      (TensorRT-LLM examples/draft_target_model/README.md @11925f6).
    - other engine repositories: one rank per GPU of the engine (leader mode).
    - reference: 1 (CPU).
    """
    if backend == "engine" and not modes.info(mode).two_model:
        return engine_world_size
    return 1


def container_version(trtllm_version: str | None = None) -> str | None:
    """The Triton container version (yy.mm) launch_triton_server.py compares with 24.06:
    $NVIDIA_TRITON_SERVER_VERSION inside the container, else the NGC container that carries
    `trtllm_version` (toolkit/containers/images.py), so that a dry run shows what the container runs."""
    env = os.environ.get("NVIDIA_TRITON_SERVER_VERSION")
    if env:
        return env
    from toolkit.containers import images, release

    version = trtllm_version or images.DEFAULT_TRTLLM
    if release.parse(version) is None:
        return None
    return images.TRTLLM_TO_CONTAINER.get(".".join(map(str, release.release(version))))


def newer_than(version: str | None, floor: str) -> bool:
    """`version` is newer than `floor` on the release tuple (toolkit.containers.release)."""
    from toolkit.containers import release

    if not version or release.parse(version) is None:
        return False
    return release.release(version) > release.release(floor)


def plan_launch(
    recipe: Recipe,
    backend: str,
    *,
    engine_world_size: int | None = None,
    trtllm_version: str | None = None,
    spawn_processes: bool = True,
) -> LaunchPlan:
    """The launch plan of `recipe` served by `backend` (resolved: engine | llmapi | reference).

    engine_world_size: the target engine's (its config.json); default the recipe's tp×pp.
    trtllm_version: the TensorRT-LLM of the container that runs it (default the recipe's); it
      tells the Triton container version that decides orchestrator mode's memory pools.
    """
    p = recipe.parallel
    world = engine_world_size if engine_world_size is not None else p.world_size
    multi_model = backend == "engine" and modes.info(recipe.mode).two_model
    gpu_ids: dict[str, tuple[int, ...]] = {}
    num_gpus = 0
    if backend != "reference":
        gpu_ids["target"] = tuple(p.devices("target"))
        if multi_model:
            gpu_ids["draft"] = tuple(p.devices("draft"))
        if backend == "llmapi":
            num_gpus = p.world_size
        else:
            ids = {i for role_ids in gpu_ids.values() for i in role_ids}
            num_gpus = max(max(ids) + 1, world)
    version = container_version(trtllm_version or recipe.trtllm_version) if multi_model else None
    pools: tuple[int, ...] = ()
    if multi_model and spawn_processes and newer_than(version, POOL_CONTAINER_FLOOR):
        # launch_triton_server.py add_multi_model_config (tensorrtllm_backend v0.19.0): one pool per GPU
        # of the node (it counts `nvidia-smi --list-gpus`; we count the deployment's GPUs).
        pools = tuple(range(num_gpus or 1))
    names = ("tensorrt_llm", "tensorrt_llm_draft") if multi_model else ("tensorrt_llm",)
    return LaunchPlan(
        ranks=launch_ranks(backend, recipe.mode, world),
        multi_model=multi_model,
        model_names=names if backend == "engine" else (),
        backend=backend,
        gpu_ids=gpu_ids,
        num_gpus=num_gpus,
        memory_pools=pools,
        spawn_processes=spawn_processes,
        container_version=version,
    )


def launch_argv(plan: LaunchPlan, site: LaunchSite) -> list[str]:
    """The argv that starts `plan` at `site`: one tritonserver, or `mpirun` for several ranks and
    for orchestrator mode (see the module docstring)."""
    if not plan.mpirun:
        return _single(site)
    argv = ["mpirun", "--allow-run-as-root", *site.mpi_args]
    for rank in range(plan.ranks):
        if rank > 0:
            argv.append(":")
        argv += ["-n", "1", site.tritonserver, f"--model-repository={site.model_repo}"]
        if site.exit_timeout_s is not None:
            argv.append(f"--exit-timeout-secs={site.exit_timeout_s}")
        if rank == 0:
            argv += _ports(site, grpc_first=True)
        else:
            argv.append("--model-control-mode=explicit")
            argv += [f"--load-model={n}" for n in plan.model_names if n]
        if plan.memory_pools:
            argv += ["--pinned-memory-pool-byte-size=0", "--enable-peer-access=false"]
            argv += [f"--cuda-memory-pool-byte-size={j}:0" for j in plan.memory_pools]
        if site.backend_directory is not None:
            argv.append(f"--backend-directory={site.backend_directory}")
        argv.append("--disable-auto-complete-config")
        if site.shm_prefix is not None:
            argv.append(f"--backend-config=python,shm-region-prefix-name={site.shm_prefix}{rank}_")
        if rank == 0:
            argv += [*([f"--log-verbose={site.log_verbose}"] if site.log_verbose else []), *site.extra_args]
    return argv


def _ports(site: LaunchSite, *, grpc_first: bool) -> list[str]:
    http, grpc = f"--http-port={site.http_port}", f"--grpc-port={site.grpc_port}"
    out = [grpc, http] if grpc_first else [http, grpc]
    out.append(f"--metrics-port={site.metrics_port}")
    if site.host:
        out += [
            f"--http-address={site.host}",
            f"--grpc-address={site.host}",
            f"--metrics-address={site.host}",
        ]
    return out


def _single(site: LaunchSite) -> list[str]:
    argv = [site.tritonserver, f"--model-repository={site.model_repo}", *_ports(site, grpc_first=False)]
    if site.disable_auto_complete_config:
        argv.append("--disable-auto-complete-config")
    if site.shm_prefix is not None:
        suffix = "0_" if site.number_single_rank else ""
        # Unique per server, so that two servers' Python backends never share a region.
        argv.append(f"--backend-config=python,shm-region-prefix-name={site.shm_prefix}{suffix}")
    if site.backend_directory is not None:
        argv.append(f"--backend-directory={site.backend_directory}")
    if site.log_verbose:
        argv.append(f"--log-verbose={site.log_verbose}")
    if site.exit_timeout_s is not None:
        argv.append(f"--exit-timeout-secs={site.exit_timeout_s}")
    return argv + [*site.model_control, *site.extra_args]
