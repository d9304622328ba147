"""`sdtk deploy RECIPE --target slurm`: an sbatch script for the leader-mode layout.

nodes = ceil(tp*pp / gpus_per_node); one task (= MPI rank = tritonserver) per GPU. Rank 0 runs
on the first node and is the only one with ports; ranks > 0 load the TensorRT-LLM model(s)
explicitly and each rank gets its own Python-backend shm prefix (toolkit.server.plan).

Two launchers:
- `srun` (default with a container image): a small task script that srun runs in every task. With
  pyxis, the tasks run in `--container-image` with the workdir mounted at the same path. What a
  task runs depends on the launch:
  - leader mode (engine, one rank per GPU): `srun --mpi=pmix`, one task per rank; the script picks
    the rank's tritonserver command by SLURM_PROCID.
  - orchestrator mode (engine draft-target, TRTLLM_ORCHESTRATOR=1): one task, `srun --mpi=none`,
    that runs the local launch's `mpirun --allow-run-as-root -n 1 tritonserver ...` itself. The
    orchestrator spawns its workers with MPI_Comm_spawn (tensorrtllm_backend v0.19.0
    docs/llama_multi_instance.md 314-322), which PMIx under Slurm does not provide (pyxis FAQ), and
    launch_triton_server.py always starts it under `mpirun -n 1` (v0.19.0 scripts/launch_triton_server.py
    154-158); so the task brings its own Open MPI runtime instead of a bare tritonserver.
  - llmapi: `srun --mpi=pmix`, one task per GPU of the model (tp×pp), each running
    `trtllm-llmapi-launch tritonserver ...`: rank 0 serves, the others become the LLM API's MPI
    workers (tensorrtllm_backend r25.12 docs/llmapi.md 99-105; TensorRT-LLM
    tensorrt_llm/llmapi/trtllm-llmapi-launch picks the role by SLURM_PROCID).
- `mpirun` (default on bare metal): the same `mpirun` argv sdtk runs locally; Open MPI takes the
  nodes from the Slurm allocation.

Then the script waits for /v2/health/ready and the model's ready endpoint with a deadline, leaves
early if the launcher died, and prints the last 50 log lines on failure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from toolkit import __version__
from toolkit._fs import atomic_write
from toolkit.containers import ngc_tritonserver
from toolkit.errors import UsageError
from toolkit.ops.layout import Topology, entry_model, launch_argv, plan_topology, rank_commands
from toolkit.ops.templating import render, shell_join, var
from toolkit.server.workdir import REPO_SUBDIR
from toolkit.shellsafe import check_line, heredoc_tag

if TYPE_CHECKING:
    from toolkit.recipe import Recipe

Launcher = Literal["srun", "mpirun"]  # plans report "direct" for a bare-metal single rank
# TensorRT-LLM's launcher for the LLM API under Slurm (installed with the tensorrt_llm wheel, on PATH).
LLMAPI_LAUNCH = "trtllm-llmapi-launch"


@dataclass
class SlurmPlan:
    recipe_name: str
    topology: Topology
    launcher: str
    argv: list[str]  # the leader-mode command (mpirun, or a single tritonserver)
    rank_argvs: list[list[str]]  # each Slurm task's command (srun), or each rank's tritonserver argv
    script: str
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "recipe": self.recipe_name,
            "launcher": self.launcher,
            "topology": self.topology.to_dict(),
            "argv": self.argv,
            "notes": self.notes,
        }


_TIME = re.compile(r"^(\d+-)?\d{1,2}(:\d{2}){0,2}$")


def plan_slurm(
    recipe: Recipe,
    *,
    workdir: str | Path,
    gpus_per_node: int = 8,
    container_image: str | None = None,
    container_mounts: list[str] | None = None,
    launcher: Launcher | None = None,
    tritonserver: str | None = None,
    partition: str | None = None,
    account: str | None = None,
    time_limit: str = "04:00:00",
    job_name: str | None = None,
    exclusive: bool = True,
    ready_timeout_s: int = 3600,
    trtllm_version: str | None = None,
) -> SlurmPlan:
    """Everything `render_slurm` writes, without writing it."""
    workdir = str(workdir)
    # #SBATCH lines are read by sbatch, not by bash: quoting cannot protect them, so refuse newlines.
    check_line(workdir, "--workdir")
    for what, value in (("--job-name", job_name), ("--partition", partition), ("--account", account),
                        ("--container-image", container_image), ("--tritonserver", tritonserver)):  # fmt: skip
        if value is not None:
            check_line(value, what)
    check_line(recipe.display_name, "the recipe name")
    if not workdir.startswith("/"):
        raise UsageError(
            f"--workdir {workdir} must be an absolute path on a filesystem all nodes share",
            hint="e.g. --workdir /lustre/$USER/sdtk",
        )
    if not _TIME.match(time_limit):
        raise UsageError(f"--time '{time_limit}' is not a Slurm time such as 04:00:00 or 1-00:00:00")
    how: str = launcher or ("srun" if container_image else "mpirun")
    if how not in ("srun", "mpirun"):
        raise UsageError(f"launcher must be srun or mpirun, got '{how}'")
    if container_image and how == "mpirun":
        raise UsageError(
            "--container-image runs tasks through srun (pyxis); mpirun cannot start ranks inside it",
            hint="drop --how mpirun, or drop --container-image to run on bare metal",
        )
    from toolkit.containers import images

    version = trtllm_version or (images.trtllm_version_of(container_image) if container_image else None)
    topo = plan_topology(recipe, gpus_per_node=gpus_per_node, trtllm_version=version)
    recipe_name = recipe.display_name
    sv = recipe.serving
    repo = f"{workdir.rstrip('/')}/{recipe_name}/{REPO_SUBDIR}"
    exe = tritonserver or (ngc_tritonserver() if container_image else "tritonserver")
    argv = launch_argv(
        topo,
        model_repo=repo,
        http_port=sv.http_port,
        grpc_port=sv.grpc_port,
        metrics_port=sv.metrics_port,
        tritonserver=exe,
    )
    if how == "mpirun" and argv[0] != "mpirun":
        how = "direct"  # one rank: a plain tritonserver, as the local how runs it
    notes = list(topo.notes)
    step = _srun_step(topo) if how == "srun" else "ranks"
    tasks_per_node = topo.ranks_per_node
    if step == "orchestrator":
        # The whole mpirun argv in one task: the orchestrator's MPI_Comm_spawn needs mpirun's runtime.
        ranks = [list(argv)]
        srun = ["srun", "--mpi=none", "--nodes=1", "--ntasks=1"]
        notes.append(
            "orchestrator mode spawns its workers with MPI_Comm_spawn, which PMIx under Slurm does not "
            "provide: one Slurm task (srun --mpi=none) runs `mpirun -n 1 tritonserver`, on one node"
        )
    elif step == "llmapi":
        tasks_per_node = max(1, topo.gpus)
        ranks = [[LLMAPI_LAUNCH, *argv] for _ in range(tasks_per_node)]
        srun = ["srun", "--mpi=pmix", "--nodes=1", f"--ntasks-per-node={tasks_per_node}"]
        notes.append(
            f"llmapi: {tasks_per_node} Slurm task(s), each `{LLMAPI_LAUNCH} tritonserver`: rank 0 serves, "
            "the others are the LLM API's MPI workers (tensorrtllm_backend r25.12 docs/llmapi.md)"
        )
    else:
        ranks = rank_commands(argv)
        srun = ["srun", "--mpi=pmix", f"--nodes={topo.nodes}", f"--ntasks-per-node={tasks_per_node}"]
    if container_image:
        mounts = [f"{workdir}:{workdir}", *(container_mounts or [])]
        srun += [f"--container-image={container_image}", f"--container-mounts={','.join(mounts)}"]
    srun += ["bash", var("RANK_SCRIPT")]
    srun_cmd = shell_join(srun)
    if sv.host not in ("0.0.0.0", "::"):
        notes.append(f"serving.host {sv.host} is ignored: Triton binds all interfaces of the first node")
    name = job_name or f"sdtk-{recipe_name}"
    rank_cmds = [shell_join(r, indent="     ") for r in ranks]
    script = render(
        "slurm.sbatch.j2",
        sdtk_version=__version__,
        recipe_name=recipe_name,
        layout_line=f"{topo.nodes} node(s) × {topo.ranks_per_node} rank(s), {topo.gpus_in_node} GPU(s) per node, "
        f"backend {topo.backend}",
        launcher_line=how + (f" in {container_image} (pyxis)" if container_image else ""),
        backend_why=topo.why,
        job_name=name,
        nodes=topo.nodes,
        ranks_per_node=tasks_per_node,
        gpus_per_node=topo.gpus_in_node,
        time_limit=time_limit,
        # Slurm does not create the --output directory: use the workdir, which must exist.
        log_dir=workdir.rstrip("/"),
        exclusive=exclusive,
        partition=partition,
        account=account,
        workdir=workdir,
        repo=repo,
        http_port=sv.http_port,
        grpc_port=sv.grpc_port,
        metrics_port=sv.metrics_port,
        model_name=entry_model(recipe, topo.backend),
        ready_timeout_s=ready_timeout_s,
        env=topo.launch.env,
        launcher=how,
        ranks=len(ranks),
        step=step,
        rank_cmds=rank_cmds,
        rank_tag=heredoc_tag("\n".join(rank_cmds), "RANKS"),
        srun_cmd=srun_cmd,
        command=shell_join(argv),
    )
    return SlurmPlan(recipe_name, topo, how, argv, ranks, script, notes)


def _srun_step(topo: Topology) -> str:
    """What each srun task runs: "ranks" (leader mode: task i is rank i's tritonserver),
    "orchestrator" (one task running the mpirun launch) or "llmapi" (trtllm-llmapi-launch in every task)."""
    if topo.multi_model:
        return "orchestrator"
    if topo.backend == "llmapi":
        return "llmapi"
    return "ranks"


def render_slurm(recipe: Recipe, *, out_dir: Path | str, **options: Any) -> list[Path]:
    """Write `<out_dir>/<recipe>.sbatch` (submit with `sbatch`); returns the files written.
    `options` are plan_slurm's (workdir is required)."""
    return write_slurm(plan_slurm(recipe, **options), out_dir)


def write_slurm(plan: SlurmPlan, out_dir: Path | str) -> list[Path]:
    """Write a planned job's `<out_dir>/<recipe>.sbatch`; returns the files written."""
    return [atomic_write(Path(out_dir) / f"{plan.recipe_name}.sbatch", plan.script, mode=0o755)]
