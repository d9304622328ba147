"""`sdtk deploy`: build (skipping finished steps) → render the repository → launch → validate.

One deployment lives in `<workdir>/<recipe name>/`: `engines/`, `triton_repo/`, `logs/`
and, while a server runs, `state.json`.
"""

from __future__ import annotations

import contextlib
import secrets
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.errors import DISK_FULL_ERRNOS, DiskFull, SdtkError, UsageError
from toolkit.progress import Step, quiet, steps
from toolkit.recipe import Recipe

if TYPE_CHECKING:
    from toolkit.server.lock import WorkdirLock

from toolkit.server.policies import POLICY_TEXT
from toolkit.server.workdir import DEFAULT_WORKDIR, REPO_SUBDIR

_stderr = steps("deploy")


def deployment_dir(recipe: Recipe, workdir: Path | None) -> Path:
    return (workdir or DEFAULT_WORKDIR).resolve() / recipe.display_name


@dataclass
class DeployResult:
    recipe: str
    backend: str
    mode: str
    workdir: Path
    model_repo: Path
    model: str
    entry_kind: str
    decoupled: bool
    pid: int | None = None
    http_url: str | None = None
    grpc_url: str | None = None
    metrics_url: str | None = None
    command: list[str] = field(default_factory=list)
    validation: dict[str, Any] | None = None
    ready_seconds: float | None = None
    watchdog_pid: int | None = None  # a detached deploy's watchdog (toolkit.server.watchdog)
    target: str = "local"  # local | k8s | slurm (TARGETS)
    files: list[Path] = field(default_factory=list)  # k8s / slurm: what was written, to apply or submit
    # Where the target's weights came from when they are not the checkpoint's own (a GGUF's
    # dequantized conversion: toolkit.hub.gguf's provenance note); None otherwise.
    weights: str | None = None

    @property
    def model_name(self) -> str:
        return self.model

    def to_dict(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "http_url": self.http_url,
            "grpc_url": self.grpc_url,
            "metrics_url": self.metrics_url,
            "model": self.model,
            "model_repo": str(self.model_repo),
            "workdir": str(self.workdir),
            "recipe": self.recipe,
            "backend": self.backend,
            "mode": self.mode,
            "entry_kind": self.entry_kind,
            "decoupled": self.decoupled,
            "command": self.command,
            "ready_seconds": self.ready_seconds,
            "validation": self.validation,
            "watchdog_pid": self.watchdog_pid,
            "weights": self.weights,
        } | ({"target": self.target, "files": [str(p) for p in self.files]} if self.target != "local" else {})


def render(
    recipe: Recipe, *, backend: str | None, workdir: Path | None, progress: Step = _stderr
) -> tuple[Any, Any]:
    """Build (or reuse) the engines and render the model repository. Returns (BuildResult, RenderResult)."""
    from toolkit.build import build
    from toolkit.repo import render_repository

    root = deployment_dir(recipe, workdir)
    result = build(recipe, backend=backend, workdir=root.parent, dry_run=False, progress=progress)
    engines: dict[str, Path | str] = {
        role: Path(path) for role, path in result.outputs.items() if role in ("target", "draft")
    }
    progress(f"rendering the {result.backend} model repository into {root / REPO_SUBDIR}")
    rendered = render_repository(recipe, engines, root / REPO_SUBDIR, backend=result.backend)
    for w in rendered.warnings:
        progress(f"warning: {w}")
    if rendered.missing:
        raise SdtkError(
            f"the repository at {rendered.path} still needs: {', '.join(rendered.missing)}",
            hint=f"see {rendered.runbook}",
        )
    _save_recipe(recipe, root)
    return result, rendered


RECIPE_FILE = "recipe.json"


def _save_recipe(recipe: Recipe, root: Path) -> None:
    """The deployed recipe, overrides applied, so that `sdtk validate --workdir` can find it."""
    import json

    from toolkit._fs import atomic_write

    data = {
        "source": str(recipe.source_path) if recipe.source_path else None,
        "recipe": recipe.model_dump(mode="json"),
    }
    atomic_write(root / RECIPE_FILE, json.dumps(data, indent=2))


@contextlib.contextmanager
def _disk_full_named(root: Path) -> Iterator[None]:
    """A full disk while building, rendering or launching (ENOSPC, EDQUOT) is a DiskFull naming
    the path being written and the space left, not an internal error."""
    try:
        yield
    except OSError as e:
        if e.errno not in DISK_FULL_ERRNOS:
            raise
        raise DiskFull.from_oserror(e, root) from None


def load_deployed_recipe(root: Path) -> Recipe | None:
    import json

    from toolkit.recipe import parse_recipe

    path = root / RECIPE_FILE
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    return parse_recipe(data["recipe"], path=Path(data["source"]) if data.get("source") else None)


def _server(
    recipe: Recipe, rendered: Any, root: Path, *, tritonserver: Any = None, auto_ports: bool = False
) -> Any:
    """The TritonServer that serves a rendered repository (nothing runs until start()): the
    render's launch plan (RenderResult.launch, toolkit.server.plan) at the recipe's host and ports."""
    from toolkit.server.launch import TritonServer

    return TritonServer.from_serving(
        recipe.serving,
        rendered.path,
        workdir=root,
        tritonserver=tritonserver,
        auto_ports=auto_ports,
        model_name=rendered.entry_model,
        plan=rendered.launch,
    )


TARGETS = ("local", "k8s", "slurm", "dynamo")


def deploy(
    recipe: Recipe,
    *,
    target: str = "local",
    backend: str | None = None,
    workdir: Path | None = None,
    render_only: bool = False,
    detach: bool = False,
    auto_ports: bool = False,
    tritonserver: str | None = None,
    validate: bool = True,
    ready_timeout: float = 600.0,
    progress: Step = _stderr,
    on_ready: Callable[[DeployResult], None] | None = None,
    on_failure: str | None = None,
    burst: bool = True,
    out: Path | None = None,
    namespace: str = "default",
    image: str | None = None,
    replicas: int = 1,
    workers: int = 1,
    router_mode: str | None = None,
    engine: str = "triton",
    disagg: bool = False,
    prefill_workers: int = 1,
) -> DeployResult:
    """Deploy `recipe` on `target`.

    local: build, render, launch, validate; foreground mode blocks until Ctrl-C, `detach` returns
    with the server running. k8s / slurm: write the manifests (toolkit.ops.k8s: `namespace`,
    `image`, `replicas`) or the sbatch script (toolkit.ops.slurm: `image` runs the ranks in a
    container, `workdir` is where the nodes find the repository) under `out`, and return them.

    `on_ready` runs once the server is ready and validated (the CLI prints the URLs there).
    `on_failure` (toolkit.server.policies.POLICIES): what to do when a Python backend stub or the
    server dies: foreground, this process does it (default `stop`: stop and raise); detached, a
    watchdog process started beside the server does it (default `none` here: no watchdog; the
    CLI's default is `restart`).

    dynamo: Dynamo's frontend and `workers` workers behind `router_mode` (toolkit.dynamo.launch).
    k8s with `engine="dynamo"`: a DynamoGraphDeployment (toolkit.dynamo.k8s): `workers` worker
    replicas, or with `disagg` `prefill_workers` prefill and `workers` decode replicas.
    """
    if target == "dynamo":
        return _deploy_dynamo(
            recipe,
            deployment_dir(recipe, workdir),
            backend=backend,
            workers=workers,
            router_mode=router_mode,
            detach=detach,
            auto_ports=auto_ports,
            validate=validate,
            ready_timeout=ready_timeout,
            on_failure=on_failure or ("restart" if detach else "stop"),
            progress=progress,
            on_ready=on_ready,
        )
    if target == "k8s" and engine == "dynamo":
        return _render_dgd(
            recipe,
            out,
            namespace=namespace,
            image=image,
            workers=workers,
            prefill_workers=prefill_workers,
            disagg=disagg,
            router_mode=router_mode,
        )
    if engine != "triton":
        raise UsageError(f"--engine {engine} goes with --target k8s only (--target dynamo runs Dynamo here)")
    if target != "local":
        if backend is not None and backend != recipe.backend:  # as build() applies it
            recipe = recipe.model_copy(update={"backend": backend})
        return render_target(
            recipe,
            target,
            out=out,
            workdir=workdir,
            namespace=namespace,
            image=image,
            replicas=replicas,
            progress=progress,
        )
    from toolkit.server.launch import check_launch_path, check_workdir_free
    from toolkit.server.lock import WorkdirLock

    root = deployment_dir(recipe, workdir)
    if not render_only:
        check_launch_path(root, "workdir")
    # One deploy per deployment directory, refused before anything is built or rendered; the
    # server inherits the lock (toolkit.server.lock), this process drops its copy on return.
    with WorkdirLock.acquire(root, f"sdtk deploy {recipe.display_name}") as lock, _disk_full_named(root):
        check_workdir_free(root)
        return _deploy(
            recipe,
            root,
            lock,
            backend=backend,
            workdir=workdir,
            render_only=render_only,
            detach=detach,
            auto_ports=auto_ports,
            tritonserver=tritonserver,
            validate=validate,
            ready_timeout=ready_timeout,
            progress=progress,
            on_ready=on_ready,
            on_failure=on_failure or ("none" if detach else "stop"),
            burst=burst,
        )


def _deploy_dynamo(
    recipe: Recipe, root: Path, *, on_ready: Callable[[DeployResult], None] | None, **kw: Any
) -> DeployResult:
    """`deploy(target=dynamo)`: toolkit.dynamo.launch, its result as a DeployResult."""
    from toolkit.dynamo.launch import deploy_dynamo

    def ready(plan: Any, info: dict[str, Any]) -> DeployResult:
        result = DeployResult(
            recipe=recipe.display_name,
            backend=plan.backend,
            mode=recipe.mode,
            workdir=root,
            model_repo=root / "dynamo",
            model=plan.model,
            entry_kind="openai",
            decoupled=True,
            pid=info.get("pid"),
            http_url=plan.http_url,
            metrics_url=f"{plan.http_url}/metrics",
            command=plan.frontend.argv,
            validation=info.get("validation"),
            ready_seconds=info.get("ready_seconds"),
            target="dynamo",
        )
        if on_ready is not None:
            on_ready(result)
        return result

    return deploy_dynamo(recipe, root, save_recipe=_save_recipe, on_ready=ready, **kw)


def _render_dgd(recipe: Recipe, out: Path | None, **kw: Any) -> DeployResult:
    """`deploy(target=k8s, engine=dynamo)`: a DynamoGraphDeployment under `out` (toolkit.dynamo.k8s)."""
    from toolkit.dynamo.k8s import plan_dgd, write_dgd

    if out is None:
        raise UsageError("--target k8s needs --out DIR")
    dgd = plan_dgd(recipe, **kw)
    return DeployResult(
        recipe=recipe.display_name,
        backend="llmapi",
        mode=recipe.mode,
        workdir=out,
        model_repo=out,
        model=dgd.served_name,
        entry_kind="openai",
        decoupled=True,
        target="k8s",
        files=write_dgd(dgd, out),
    )


def render_target(
    recipe: Recipe,
    target: str,
    *,
    out: Path | None,
    workdir: Path | None = None,
    namespace: str = "default",
    image: str | None = None,
    replicas: int = 1,
    progress: Step = _stderr,
) -> DeployResult:
    """`deploy(target=k8s|slurm)`: write the files that deploy `recipe` there under `out`; the
    support matrix's warnings (the engine path deprecated on 1.2.x) go to `progress` too."""
    from toolkit.compat import check_recipe
    from toolkit.errors import UsageError
    from toolkit.repo.render import entry_point

    if target not in ("k8s", "slurm"):
        raise UsageError(f"target must be one of {', '.join(TARGETS)}, not '{target}'")
    if out is None:
        raise UsageError(f"--target {target} needs --out DIR")
    if target == "k8s":
        from toolkit.ops.k8s import MODELS_MOUNT, plan_k8s, write_k8s

        k8s = plan_k8s(recipe, namespace=namespace, image=image, replicas=replicas)
        topology, root = k8s.topology, Path(MODELS_MOUNT) / recipe.display_name
    else:
        from toolkit.ops.slurm import plan_slurm, write_slurm

        base = (workdir or DEFAULT_WORKDIR).resolve()
        slurm = plan_slurm(recipe, workdir=base, container_image=image)
        topology, root = slurm.topology, base / recipe.display_name
    # What clients call is decided (and a bad serving.model_name refused) before a file is written.
    entry, kind = entry_point(recipe, topology.backend)
    files = write_k8s(k8s, out, validate=True) if target == "k8s" else write_slurm(slurm, out)
    for w in check_recipe(recipe, installed_version=topology.trtllm_version).warnings:
        progress(f"WARNING: {w}")
    return DeployResult(
        recipe=recipe.display_name,
        backend=topology.backend,
        mode=recipe.mode,
        workdir=root,
        model_repo=root / REPO_SUBDIR,
        model=entry,
        entry_kind=kind,
        decoupled=recipe.serving.decoupled,
        target=target,
        files=files,
    )


def _deploy(
    recipe: Recipe,
    root: Path,
    lock: WorkdirLock,
    *,
    backend: str | None,
    workdir: Path | None,
    render_only: bool,
    detach: bool,
    auto_ports: bool,
    tritonserver: str | None,
    validate: bool,
    ready_timeout: float,
    progress: Step,
    on_ready: Callable[[DeployResult], None] | None,
    on_failure: str,
    burst: bool,
) -> DeployResult:
    built, rendered = render(recipe, backend=backend, workdir=workdir, progress=progress)
    result = DeployResult(
        recipe=recipe.display_name,
        backend=built.backend,
        mode=recipe.mode,
        workdir=root,
        model_repo=rendered.path,
        model=rendered.entry_model,
        entry_kind=rendered.entry_kind,
        decoupled=rendered.decoupled,
        weights=next(
            (s["provenance"]["note"] for s in built.sources if s["role"] == "target" and s.get("provenance")),
            None,
        ),
    )
    if render_only:
        return result
    if built.backend != "reference" and not tritonserver:
        progress("the engine and llmapi backends need tritonserver from NVIDIA's TensorRT-LLM container")

    server = _server(recipe, rendered, root, tritonserver=tritonserver, auto_ports=auto_ports)
    server.ready_timeout = ready_timeout
    server.validation = "pending" if validate else "skipped"  # status tells an unfinished one
    if not server.plan.mpirun:  # `sdtk restart MODEL` (one process)
        server.repo_key = secrets.token_urlsafe(24)
    progress(
        f"launching {server.binary.path} ({server.binary.source}); log: {root / 'logs' / 'tritonserver.log'}"
    )
    t0 = time.monotonic()
    server.start(detach=detach, lock=lock)
    try:
        result.ready_seconds = round(time.monotonic() - t0, 2)
        result.command = [server.redact(a) for a in server.command()]  # auto ports are chosen at start
        result.pid = server.pid
        result.http_url, result.grpc_url, result.metrics_url = (
            server.http_url,
            server.grpc_url,
            server.metrics_url,
        )
        progress(f"ready in {result.ready_seconds:.1f}s: {result.http_url} (model '{result.model}')")
        if validate:
            from toolkit.server.state import update_state
            from toolkit.validate import validate_deployment

            report = validate_deployment(
                http_url=result.http_url,
                grpc_url=result.grpc_url,
                model=result.model,
                recipe=recipe,
                progress=progress,
            )
            result.validation = report.to_dict()
            report.raise_if_failed()
            server.validation = "passed"
            if server.pid is not None:
                update_state(root, server.pid, validation="passed")
            if burst:
                from toolkit.validate import survive_burst

                progress(
                    survive_burst(
                        server,
                        decoupled=rendered.decoupled,
                        llmapi=rendered.entry_kind == "llmapi",
                        output_room=recipe.build.max_seq_len - recipe.build.max_input_len,
                    )
                )
    except BaseException:
        server.stop()
        raise
    if detach and on_failure != "none":
        result.watchdog_pid = _start_watchdog(server, root, on_failure)
        progress(
            f"watchdog pid {result.watchdog_pid}: when a stub or the server dies, it will "
            f"{POLICY_TEXT[on_failure]} (--on-failure {on_failure}); log: {root / 'logs' / 'watchdog.log'}"
        )
    if on_ready is not None:
        on_ready(result)
    if not detach:
        progress("serving; press Ctrl-C to stop")
        server.serve_forever(on_failure=on_failure)
    return result


def _start_watchdog(server: Any, root: Path, policy: str) -> int:
    """Write launch.json and start the watchdog of a detached server (toolkit.server.watchdog),
    recorded in state.json; it outlives this process as the server does."""
    import json

    from toolkit import runner
    from toolkit._fs import atomic_write
    from toolkit.server.state import WATCHDOG_MODULE, update_state
    from toolkit.server.watchdog import spec_path

    atomic_write(spec_path(root), json.dumps(server.spec(), indent=2, sort_keys=True) + "\n")
    proc = runner.spawn(
        [sys.executable, "-m", WATCHDOG_MODULE, str(root), "--on-failure", policy],
        log_path=root / "logs" / "watchdog.log",
        cwd=root,
    )
    assert server.pid is not None
    update_state(root, server.pid, watchdog_pid=proc.pid, watchdog_policy=policy)
    return proc.pid


def find_deployment(workdir: Path | None) -> Path:
    """The deployment directory for --workdir (toolkit.server.state.find_deployment)."""
    from toolkit.server.state import find_deployment as resolve

    return resolve(workdir, default=DEFAULT_WORKDIR)


@contextlib.contextmanager
def deployed(
    recipe_ref: str | Path | Recipe,
    overrides: tuple[str, ...] | list[str] = (),
    *,
    workdir: Path | None = None,
    validate: bool = False,
    progress: Step = _stderr,
) -> Iterator[DeployResult]:
    """A detached deployment on free ports for the length of a `with` block (bench, tune).

    Yields the DeployResult (`http_url`, `grpc_url`, `model`, `model_name`); stops the server after.
    """
    from toolkit.recipe import load_recipe
    from toolkit.server.state import stop_server

    recipe = recipe_ref if isinstance(recipe_ref, Recipe) else load_recipe(recipe_ref, list(overrides))
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sdtk-deploy-")))
        result = deploy(
            recipe, workdir=workdir, detach=True, auto_ports=True, validate=validate, progress=progress
        )
        try:
            yield result
        finally:
            stop_server(result.workdir)


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
    from toolkit.build import build
    from toolkit.repo.render import entry_point
    from toolkit.server.discover import Candidate
    from toolkit.server.launch import TritonServer
    from toolkit.server.plan import plan_launch

    root = deployment_dir(recipe, workdir)
    built = build(
        recipe,
        backend=backend,
        workdir=root.parent,
        dry_run=True,
        progress=quiet,
        container=container,
        container_root=container_root,
    )
    entry, _kind = entry_point(recipe, built.backend)
    launch = plan_launch(recipe, built.backend)  # what render_repository will store
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
