"""How a recipe maps onto nodes, GPUs and MPI ranks, and the per-node launch command.

Shared by the Kubernetes and Slurm renderers, so that both launch exactly what the local launcher
does: the recipe's `LaunchPlan` (toolkit.server.plan: leader mode, one tritonserver per rank, ports
on rank 0 only, `--model-control-mode=explicit --load-model=...` on ranks > 0, a per-rank
Python-backend shm prefix), at a site of their own (bind every interface, shm prefix `sdtk`).

- engine backend: world_size = tp*pp MPI ranks, one GPU each. Draft-target needs orchestrator mode
  (`--multi-model`, one process that spawns the ranks), which upstream supports on one node only.
- llmapi backend: one tritonserver; the LLM API spawns its tp*pp workers itself, so all GPUs must
  sit in one node (a multi-node launch of the LLM-API Triton model is not documented upstream).
- reference backend: one tritonserver on CPU, no GPUs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from toolkit import compat, containers, modes
from toolkit.errors import UsageError
from toolkit.server.plan import LaunchPlan, LaunchSite, plan_launch

if TYPE_CHECKING:
    from toolkit.recipe import Recipe

DEFAULT_GPUS_PER_NODE = 8
SHM_PREFIX = "sdtk"  # rank r's Python-backend shm region: sdtk{r}_
EXIT_TIMEOUT_S = 30


@dataclass(frozen=True)
class Topology:
    backend: str  # engine | llmapi | reference
    trtllm_version: str | None
    launch: LaunchPlan  # ranks, orchestrator mode, GPUs, pools, env: the local launch's facts
    gpus_per_node: int
    nodes: int
    why: str
    notes: tuple[str, ...] = field(default_factory=tuple)
    warnings: tuple[str, ...] = ()  # the support matrix's (a deprecated path), also at the end of `why`

    @property
    def ranks(self) -> int:
        """tritonserver processes under one MPI world (1 = no mpirun)."""
        return self.launch.ranks

    @property
    def gpus(self) -> int:
        """GPUs in one replica (all nodes together)."""
        return self.launch.num_gpus

    @property
    def multi_model(self) -> bool:
        """Orchestrator mode (TRTLLM_ORCHESTRATOR=1)."""
        return self.launch.multi_model

    @property
    def model_names(self) -> tuple[str, ...]:
        """TRT-LLM models that ranks > 0 load explicitly."""
        return self.launch.model_names

    @property
    def multi_node(self) -> bool:
        return self.nodes > 1

    @property
    def ranks_per_node(self) -> int:
        return self.ranks // self.nodes if self.multi_node else self.ranks

    @property
    def gpus_in_node(self) -> int:
        """GPUs requested by each pod / each Slurm node."""
        return self.gpus // self.nodes if self.gpus else 0

    def to_dict(self) -> dict:
        return {
            "backend": self.backend,
            "trtllm_version": self.trtllm_version,
            "ranks": self.ranks,
            "gpus": self.gpus,
            "gpus_per_node": self.gpus_per_node,
            "nodes": self.nodes,
            "multi_node": self.multi_node,
            "multi_model": self.multi_model,
            "model_names": list(self.model_names),
            "why": self.why,
            "notes": list(self.notes),
        }


def plan_topology(
    recipe: Recipe, *, gpus_per_node: int = DEFAULT_GPUS_PER_NODE, trtllm_version: str | None = None
) -> Topology:
    """Backend (through the support matrix, for the TensorRT-LLM version the image carries), GPUs,
    nodes and ranks for one replica of `recipe`. Raises CompatError / UsageError with the fix."""
    if gpus_per_node < 1:
        raise UsageError(f"gpus_per_node must be >= 1, got {gpus_per_node}")
    version = trtllm_version or recipe.trtllm_version
    # The container is where TensorRT-LLM is installed: its version plays the "installed" role.
    res = compat.check_recipe(recipe, installed_version=version)
    backend = res.backend
    world = recipe.parallel.tp * recipe.parallel.pp
    launch = plan_launch(recipe, backend, trtllm_version=version)
    notes: list[str] = []

    if backend == "reference":
        if world > 1:
            notes.append(f"backend reference runs on CPU; parallel.tp×pp = {world} is ignored")
        return Topology(backend, version, launch, gpus_per_node, 1, res.why, tuple(notes), res.warnings)
    if launch.multi_model:
        notes.append(
            "engine draft-target runs in orchestrator mode (--multi-model): one tritonserver that "
            "spawns the target's and draft's ranks (tensorrtllm_backend launch_triton_server.py)"
        )
    nodes = max(1, math.ceil(world / gpus_per_node))
    if nodes > 1:
        _check_multi_node(backend, launch, world, nodes, gpus_per_node)
    return Topology(backend, version, launch, gpus_per_node, nodes, res.why, tuple(notes), res.warnings)


def _check_multi_node(backend: str, launch: LaunchPlan, world: int, nodes: int, gpus_per_node: int) -> None:
    if backend != "engine":
        raise UsageError(
            f"parallel.tp×pp = {world} GPUs needs {nodes} nodes of {gpus_per_node}, but backend "
            f"'{backend}' serves from one tritonserver process, which cannot span nodes",
            hint="use backend: engine (leader mode spans nodes), lower parallel.tp/pp, or raise "
            "--gpus-per-node if your nodes have more GPUs",
        )
    if launch.multi_model:
        raise UsageError(
            f"engine draft-target needs orchestrator mode, which is single-node only, but "
            f"parallel.tp×pp = {world} GPUs needs {nodes} nodes of {gpus_per_node}",
            hint="fit the target into one node (lower parallel.tp/pp) or use backend: llmapi",
        )
    if world % gpus_per_node:
        raise UsageError(
            f"parallel.tp×pp = {world} is not a multiple of --gpus-per-node {gpus_per_node}; "
            "a multi-node leader-mode layout puts the same number of ranks on every node",
            hint=f"use a tp×pp that is a multiple of {gpus_per_node}, or set --gpus-per-node to a divisor of {world}",
        )


def pod_site(
    topo: Topology,
    *,
    model_repo: str,
    http_port: int,
    grpc_port: int,
    metrics_port: int,
    tritonserver: str | None = None,
    hosts: list[str] | None = None,
    mpi_args: list[str] | None = None,
) -> LaunchSite:
    """Where a replica runs in a pod or on a Slurm node: every interface bound (127.0.0.1 would hide
    the server), shm prefix `sdtk`, the NGC tritonserver unless `tritonserver` names another.

    `hosts` (multi-node): host names, leader first; each gets `ranks_per_node` slots, so rank 0 (the
    one with ports) runs on the first host. `mpi_args` go to mpirun itself (e.g. an rsh agent).
    """
    head: list[str] = []
    if hosts:
        if len(hosts) != topo.nodes:
            raise UsageError(f"{topo.nodes} node(s) need {topo.nodes} host(s), got {len(hosts)}")
        head += ["--host", ",".join(f"{h}:{topo.ranks_per_node}" for h in hosts)]
    return LaunchSite(
        tritonserver=tritonserver or containers.ngc_tritonserver(),
        model_repo=model_repo,
        http_port=http_port,
        grpc_port=grpc_port,
        metrics_port=metrics_port,
        shm_prefix=SHM_PREFIX,
        exit_timeout_s=EXIT_TIMEOUT_S,
        mpi_args=(*head, *(mpi_args or [])),
    )


def launch_argv(
    topo: Topology,
    *,
    model_repo: str,
    http_port: int,
    grpc_port: int,
    metrics_port: int,
    tritonserver: str | None = None,
    hosts: list[str] | None = None,
    mpi_args: list[str] | None = None,
) -> list[str]:
    """The command that starts one replica: the recipe's launch plan (toolkit.server.plan) at the
    `pod_site` these values describe; `mpirun` for several ranks or orchestrator mode."""
    site = pod_site(
        topo,
        model_repo=model_repo,
        http_port=http_port,
        grpc_port=grpc_port,
        metrics_port=metrics_port,
        tritonserver=tritonserver,
        hosts=hosts,
        mpi_args=mpi_args,
    )
    return topo.launch.argv(site)


def rank_commands(argv: list[str]) -> list[list[str]]:
    """Split a leader-mode `mpirun` argv into each rank's tritonserver argv (rank order)."""
    if not argv or argv[0] != "mpirun":
        return [list(argv)]
    out: list[list[str]] = []
    current: list[str] | None = None
    i = 1
    while i < len(argv):
        tok = argv[i]
        if tok == "-n" and i + 1 < len(argv) and (current is None or current == []):
            current = []
            i += 2
            continue
        if tok == ":":
            if current is not None:
                out.append(current)
            current = None
        elif current is not None:
            current.append(tok)
        i += 1
    if current:
        out.append(current)
    return out


def entry_model(recipe: Recipe, backend: str) -> str:
    """The model clients call (the Slurm job waits for it; k8s NOTES.md's doctor command probes it):
    toolkit.repo.render.entry_point's rule (toolkit.ops may not import toolkit.repo;
    tests/ops/test_slurm.py checks both agree on every recipe): tensorrt_llm in an llmapi repository,
    the BLS for draft-target, else the ensemble; serving.model_name renames it. Its default,
    "ensemble", is not a model of the first two repositories: waiting for it would time out and stop
    a healthy server, and probing it would fail."""
    name = recipe.serving.model_name
    if recipe.repository_layout(backend) == "llmapi":
        natural = "tensorrt_llm"
    elif modes.info(recipe.mode).two_model:
        natural = "tensorrt_llm_bls"
    else:
        natural = "ensemble"
    return natural if name == "ensemble" else name
