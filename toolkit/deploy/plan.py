"""`sdtk deploy --dry-run`: what a local deploy would run, without running it: the build
runbook, the repository it would render and the exact tritonserver launch."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit.progress import quiet
from toolkit.recipe import Recipe
from toolkit.server.workdir import REPO_SUBDIR


@dataclass
class DeployPlan:
    """What `sdtk deploy` would run, without running it: the build script, the repository it would
    render, and the exact tritonserver launch (argv + added environment)."""

    recipe: str
    backend: str
    mode: str
    model_repo: Path
    entry_model: str
    build_script: str
    launch_argv: list[str]
    launch_env: dict[str, str]
    world_size: int
    multi_model: bool
    num_gpus: int
    notes: list[str] = field(default_factory=list)
    repository: list[str] = field(default_factory=list)  # what the rendered repository will hold

    def to_dict(self) -> dict[str, Any]:
        return {
            "repository": self.repository,
            "recipe": self.recipe,
            "backend": self.backend,
            "mode": self.mode,
            "model_repo": str(self.model_repo),
            "entry_model": self.entry_model,
            "world_size": self.world_size,
            "multi_model": self.multi_model,
            "num_gpus": self.num_gpus,
            "launch_argv": self.launch_argv,
            "launch_env": self.launch_env,
            "notes": self.notes,
            "build_script": self.build_script,
        }

    def script(self) -> str:
        """The runbook: build, render, launch, as a bash script to read (or run in the container)."""
        import shlex

        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.launch_env.items()))
        lines = [
            self.build_script.rstrip("\n"),
            "",
            f"# --- render: the {self.backend} model repository ({self.mode}); entry model '{self.entry_model}'",
            f"sdtk deploy {shlex.quote(self.recipe)} --backend {self.backend} --render-only",
            f"#     -> {self.model_repo}",
            *(f"#     {line}" for line in self.repository),
            "",
            f"# --- launch: {self.world_size} tritonserver rank(s)"
            + (", orchestrator mode (--multi-model)" if self.multi_model else "")
            + (f", {self.num_gpus} GPU(s)" if self.num_gpus else ", CPU"),
        ]
        lines += [f"# {n}" for n in self.notes]
        lines.append((env + " " if env else "") + shlex.join(self.launch_argv))
        return "\n".join(lines) + "\n"


def plan_deploy(
    recipe: Recipe,
    *,
    backend: str | None = None,
    workdir: Path | None = None,
    tritonserver: str | None = None,
    container: str | None = None,
    container_root: Path | str | None = None,
) -> DeployPlan:
    """`sdtk deploy --dry-run`: the build runbook (as `sdtk build --dry-run`), then the launch that
    `deploy` would run for the repository it would render. Builds, renders and launches nothing.

    The engine and llmapi launches use the container's tritonserver (toolkit/data/containers/:
    /opt/tritonserver/bin/tritonserver) unless --tritonserver names another; the reference backend
    uses the tritonserver `deploy` would pick. `container` / `container_root`: as for `build`.
    """
    from toolkit.deploy.local import resolve
    from toolkit.repo.render import entry_point
    from toolkit.server.discover import Candidate
    from toolkit.server.launch import TritonServer

    d = resolve(
        recipe,
        backend=backend,
        workdir=workdir,
        progress=quiet,
        dry_run=True,
        container=container,
        container_root=container_root,
    )
    recipe, root, built, launch = d.recipe, d.root, d.built, d.launch
    entry, _kind = entry_point(recipe, built.backend)
    binary: Any = tritonserver
    if binary is None and built.backend != "reference":
        from toolkit import containers

        lay = containers.layout(trtllm_version=built.trtllm_version, container=container)
        binary = Candidate("ngc", Path(lay.tritonserver), True)
    server = TritonServer.from_serving(
        recipe.serving, root / REPO_SUBDIR, workdir=root, tritonserver=binary, model_name=entry, plan=launch
    )
    server.shm_prefix = "sdtk_"  # a fixed prefix for the plan; deploy picks a unique one
    return DeployPlan(
        recipe=str(recipe.source_path) if recipe.source_path else recipe.display_name,
        backend=built.backend,
        mode=recipe.mode,
        model_repo=root / REPO_SUBDIR,
        entry_model=entry,
        build_script=built.script or "",
        launch_argv=server.command(),
        launch_env=launch.env,
        world_size=launch.ranks,
        multi_model=launch.multi_model,
        num_gpus=launch.num_gpus,
        notes=_plan_notes(built.backend, launch),
        repository=_repository_lines(recipe, built.backend),
    )


def _repository_lines(recipe: Recipe, backend: str) -> list[str]:
    """What --dry-run says of the repository render would write."""
    from toolkit.repo.render import bls_instance_count, bls_is_entry

    if recipe.repository_layout(backend) != "inflight_batcher_llm":
        return []
    n = bls_instance_count(recipe, recipe.build.max_batch_size)
    if recipe.serving.bls_instance_count:
        why = "serving.bls_instance_count"
    elif bls_is_entry(recipe):
        why = "the engine's max_batch_size"
    else:
        why = "the ensemble is the entry model"
    return [
        f"tensorrt_llm_bls: {n} instance(s) ({why}; tensorrtllm_backend docs/model_config.md: as many BLS "
        "instances as the engine's max batch size when the BLS is used instead of the ensemble, so that "
        "concurrent requests do not queue)"
    ]


def _plan_notes(backend: str, launch: Any) -> list[str]:
    notes = []
    if backend == "llmapi":
        notes.append(
            "llmapi: one tritonserver, no mpirun; the LLM API starts the tensor/pipeline-parallel workers. "
            "Upstream's launch_triton_server.py wraps it in `mpirun -n 1` unless --no-mpi (tensorrtllm_backend "
            "docs/llmapi.md); whether the bare launch differs on a GPU is unverified (docs/runbooks/deploy.md)"
        )
    if launch.multi_model:
        ids = {role: list(v) for role, v in launch.gpu_ids.items()}
        notes.append(
            "engine draft-target: orchestrator mode, world size 1 (examples/draft_target_model/README.md); "
            f"gpu_device_ids target={ids['target']} draft={ids['draft']}"
        )
        if launch.container_version is None:
            notes.append(
                "no container version known: the CUDA memory-pool flags of containers > 24.06 are left out"
            )
    return notes
