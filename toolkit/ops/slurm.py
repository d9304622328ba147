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

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from toolkit import __version__
from toolkit._fs import atomic_write
from toolkit.containers import ngc_tritonserver
from toolkit.errors import UsageError, check_names
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


@dataclass(frozen=True)
class SlurmOptions:
    """How the sbatch script runs a recipe: `workdir` (required: an absolute path on a filesystem
    all nodes share), the nodes' GPUs, the container (pyxis) or bare metal, the launcher (srun or
    mpirun; default srun with a container image), the job's #SBATCH settings, the readiness
    deadline, and the TensorRT-LLM version (default: the container image's)."""

    workdir: str | Path = ""
    gpus_per_node: int = 8
    container_image: str | None = None
    container_mounts: tuple[str, ...] | list[str] | None = None
    launcher: Launcher | None = None
    tritonserver: str | None = None
    partition: str | None = None
    account: str | None = None
    time_limit: str = "04:00:00"
    job_name: str | None = None
    exclusive: bool = True
    ready_timeout_s: int = 3600
    trtllm_version: str | None = None

    @classmethod
    def of(cls, opts: SlurmOptions | None = None, /, **changes: Any) -> SlurmOptions:
        """`opts` (default: the defaults) with `changes`; an unknown name is a UsageError."""
        check_names(changes, (f.name for f in dataclasses.fields(cls)), "Slurm option")
        return dataclasses.replace(opts or cls(), **changes)

    def launcher_for(self, recipe: Recipe) -> str:
        """The launcher after every check (UsageError naming the flag otherwise)."""
        workdir = str(self.workdir)
        # #SBATCH lines are read by sbatch, not by bash: quoting cannot protect them, so refuse newlines.
        check_line(workdir, "--workdir")
        for what, value in (("--job-name", self.job_name), ("--partition", self.partition),
                            ("--account", self.account), ("--container-image", self.container_image),
                            ("--tritonserver", self.tritonserver)):  # fmt: skip
            if value is not None:
                check_line(value, what)
        check_line(recipe.display_name, "the recipe name")
        if not workdir.startswith("/"):
            raise UsageError(
                f"--workdir {workdir} must be an absolute path on a filesystem all nodes share",
                hint="e.g. --workdir /lustre/$USER/sdtk",
            )
        if not _TIME.match(self.time_limit):
            raise UsageError(f"--time '{self.time_limit}' is not a Slurm time such as 04:00:00 or 1-00:00:00")
        how: str = self.launcher or ("srun" if self.container_image else "mpirun")
        if how not in ("srun", "mpirun"):
            raise UsageError(f"launcher must be srun or mpirun, got '{how}'")
        if self.container_image and how == "mpirun":
            raise UsageError(
                "--container-image runs tasks through srun (pyxis); mpirun cannot start ranks inside it",
                hint="drop --how mpirun, or drop --container-image to run on bare metal",
            )
        return how


@dataclass
class _Tasks:
    """What Slurm starts: the step kind (_srun_step), each task's command, the srun argv, the
    tasks per node, and the notes that explain it."""

    step: str
    ranks: list[list[str]]
    srun: list[str]
    per_node: int
    notes: list[str]


def plan_slurm(recipe: Recipe, opts: SlurmOptions | None = None, /, **changes: Any) -> SlurmPlan:
    """Everything `render_slurm` writes, without writing it. `opts`, or its fields as keyword
    arguments (`plan_slurm(recipe, workdir="/lustre/w")`)."""
    o = SlurmOptions.of(opts, **changes)
    how = o.launcher_for(recipe)
    workdir = str(o.workdir)
    from toolkit.containers import images

    version = o.trtllm_version or (images.trtllm_version_of(o.container_image) if o.container_image else None)
    topo = plan_topology(recipe, gpus_per_node=o.gpus_per_node, trtllm_version=version)
    recipe_name = recipe.display_name
    sv = recipe.serving
    repo = f"{workdir.rstrip('/')}/{recipe_name}/{REPO_SUBDIR}"
    exe = o.tritonserver or (ngc_tritonserver() if o.container_image else "tritonserver")
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
    tasks = _tasks(topo, argv, how, o)
    if sv.host not in ("0.0.0.0", "::"):
        tasks.notes.append(
            f"serving.host {sv.host} is ignored: Triton binds all interfaces of the first node"
        )
    rank_cmds = [shell_join(r, indent="     ") for r in tasks.ranks]
    script = render(
        "slurm.sbatch.j2",
        sdtk_version=__version__,
        recipe_name=recipe_name,
        layout_line=f"{topo.nodes} node(s) × {topo.ranks_per_node} rank(s), {topo.gpus_in_node} GPU(s) per node, "
        f"backend {topo.backend}",
        launcher_line=how + (f" in {o.container_image} (pyxis)" if o.container_image else ""),
        backend_why=topo.why,
        job_name=o.job_name or f"sdtk-{recipe_name}",
        nodes=topo.nodes,
        ranks_per_node=tasks.per_node,
        gpus_per_node=topo.gpus_in_node,
        time_limit=o.time_limit,
        # Slurm does not create the --output directory: use the workdir, which must exist.
        log_dir=workdir.rstrip("/"),
        exclusive=o.exclusive,
        partition=o.partition,
        account=o.account,
        workdir=workdir,
        repo=repo,
        http_port=sv.http_port,
        grpc_port=sv.grpc_port,
        metrics_port=sv.metrics_port,
        model_name=entry_model(recipe, topo.backend),
        ready_timeout_s=o.ready_timeout_s,
        env=topo.launch.env,
        launcher=how,
        ranks=len(tasks.ranks),
        step=tasks.step,
        rank_cmds=rank_cmds,
        rank_tag=heredoc_tag("\n".join(rank_cmds), "RANKS"),
        srun_cmd=shell_join(tasks.srun),
        command=shell_join(argv),
    )
    return SlurmPlan(recipe_name, topo, how, argv, tasks.ranks, script, tasks.notes)


def _tasks(topo: Topology, argv: list[str], how: str, o: SlurmOptions) -> _Tasks:
    """The Slurm tasks that run the launch `argv` (see the module docstring)."""
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
    if o.container_image:
        workdir = str(o.workdir)
        mounts = [f"{workdir}:{workdir}", *(o.container_mounts or [])]
        srun += [f"--container-image={o.container_image}", f"--container-mounts={','.join(mounts)}"]
    srun += ["bash", var("RANK_SCRIPT")]
    return _Tasks(step, ranks, srun, tasks_per_node, notes)


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
    `options` are SlurmOptions fields (workdir is required)."""
    return write_slurm(plan_slurm(recipe, **options), out_dir)


def write_slurm(plan: SlurmPlan, out_dir: Path | str) -> list[Path]:
    """Write a planned job's `<out_dir>/<recipe>.sbatch`; returns the files written."""
    return [atomic_write(Path(out_dir) / f"{plan.recipe_name}.sbatch", plan.script, mode=0o755)]
