"""`deploy(target=local)`: build (skipping finished steps) → render the repository → launch
tritonserver here → validate, detached or in the foreground.

The deployment is resolved once (`resolve`: the recipe as deployed, its directory, the build's
backend through the support matrix, the launch plan and the rendered repository) and every later
stage reads that; `sdtk deploy --dry-run` (toolkit.deploy.plan) reads the same resolution,
unrendered.
"""

from __future__ import annotations

import contextlib
import secrets
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.deploy.result import DeployOptions, DeployResult, deployment_dir, save_recipe
from toolkit.errors import DISK_FULL_ERRNOS, DiskFull, SdtkError
from toolkit.progress import Step, steps
from toolkit.recipe import Recipe
from toolkit.server.policies import POLICY_TEXT
from toolkit.server.workdir import REPO_SUBDIR

if TYPE_CHECKING:
    from toolkit.build import BuildResult
    from toolkit.repo import RenderResult
    from toolkit.server.launch import TritonServer
    from toolkit.server.plan import LaunchPlan

_stderr = steps("deploy")


@dataclass(frozen=True)
class LocalDeployment:
    """One local deployment, resolved once (`resolve`): the recipe as deployed (`--backend`
    applied), its directory, the build (its backend through the support matrix,
    `built.resolution`; the sources), the launch plan (toolkit.server.plan) and, unless it is a
    dry run, the rendered repository (entry model; it carries the same plan)."""

    recipe: Recipe
    root: Path
    built: BuildResult
    launch: LaunchPlan
    rendered: RenderResult | None = None  # None: a dry run renders nothing

    @property
    def repo(self) -> RenderResult:
        """The rendered repository (what launch, validation and the watchdog read)."""
        if self.rendered is None:
            raise SdtkError(f"the dry run of {self.recipe.display_name} rendered no repository")
        return self.rendered

    def result(self) -> DeployResult:
        """The DeployResult before launch: what was built and rendered."""
        built, rendered = self.built, self.repo
        return DeployResult(
            recipe=self.recipe.display_name,
            backend=built.backend,
            mode=self.recipe.mode,
            workdir=self.root,
            model_repo=rendered.path,
            model=rendered.entry_model,
            entry_kind=rendered.entry_kind,
            decoupled=rendered.decoupled,
            weights=next(
                (
                    s["provenance"]["note"]
                    for s in built.sources
                    if s["role"] == "target" and s.get("provenance")
                ),
                None,
            ),
        )


def resolve(
    recipe: Recipe,
    *,
    backend: str | None,
    workdir: Path | None,
    progress: Step,
    dry_run: bool = False,
    container: str | None = None,
    container_root: Path | str | None = None,
) -> LocalDeployment:
    """The deployment every later stage reads, resolved in this one place: the build (or its plan,
    `dry_run`) resolves the backend through the support matrix, once; the launch plan follows from
    it, once; then (not a dry run) the repository is rendered with both and the deployed recipe
    saved. `container`, `container_root`: the tritonserver:<yy.mm> layout a dry run plans for, as
    `build`'s."""
    from toolkit.build import build
    from toolkit.server.plan import plan_launch

    if backend is not None and backend != recipe.backend:  # as build() applies it
        recipe = recipe.model_copy(update={"backend": backend})
    root = deployment_dir(recipe, workdir)
    built = build(
        recipe,
        workdir=root.parent,
        dry_run=dry_run,
        progress=progress,
        container=container,
        container_root=container_root,
    )
    d = LocalDeployment(recipe, root, built, plan_launch(recipe, built.backend))
    return d if dry_run else _render(d, progress)


def _render(d: LocalDeployment, progress: Step) -> LocalDeployment:
    """Render the resolved deployment's repository (its backend and launch plan as resolved) and
    save the deployed recipe beside it."""
    from toolkit.repo import render_repository

    built, root = d.built, d.root
    engines: dict[str, Path | str] = {
        role: Path(path) for role, path in built.outputs.items() if role in ("target", "draft")
    }
    progress(f"rendering the {built.backend} model repository into {root / REPO_SUBDIR}")
    rendered = render_repository(
        d.recipe, engines, root / REPO_SUBDIR, backend=built.backend, launch=d.launch
    )
    for w in rendered.warnings:
        progress(f"warning: {w}")
    if rendered.missing:
        raise SdtkError(
            f"the repository at {rendered.path} still needs: {', '.join(rendered.missing)}",
            hint=f"see {rendered.runbook}",
        )
    save_recipe(d.recipe, root)
    return replace(d, rendered=rendered)


def render(
    recipe: Recipe, *, backend: str | None, workdir: Path | None, progress: Step = _stderr
) -> tuple[Any, Any]:
    """Build (or reuse) the engines and render the model repository. Returns (BuildResult, RenderResult)."""
    d = resolve(recipe, backend=backend, workdir=workdir, progress=progress)
    return d.built, d.repo


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


def server_for(
    recipe: Recipe, rendered: Any, root: Path, *, tritonserver: Any = None, auto_ports: bool = False
) -> TritonServer:
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


def deploy_local(
    recipe: Recipe,
    options: DeployOptions,
    progress: Step,
    on_ready: Callable[[DeployResult], None] | None,
) -> DeployResult:
    from toolkit.server.launch import check_launch_path, check_workdir_free
    from toolkit.server.lock import WorkdirLock

    options = replace(options, on_failure=options.on_failure or ("none" if options.detach else "stop"))
    root = deployment_dir(recipe, options.workdir)
    if not options.render_only:
        check_launch_path(root, "workdir")
    # One deploy per deployment directory, refused before anything is built or rendered; the
    # server inherits the lock (toolkit.server.lock), this process drops its copy on return.
    with WorkdirLock.acquire(root, f"sdtk deploy {recipe.display_name}") as lock, _disk_full_named(root):
        check_workdir_free(root)
        d = resolve(recipe, backend=options.backend, workdir=options.workdir, progress=progress)
        result = d.result()
        if options.render_only:
            return result
        server = _launch(d, options, progress)
        t0, started = time.monotonic(), False
        try:
            server.start(detach=options.detach, lock=lock)
            started = True
            result.ready_seconds = round(time.monotonic() - t0, 2)
            _started(d, server, result, options, progress)
        except BaseException:
            if started:
                server.stop()
            raise
        return _serve(d, server, result, options, progress, on_ready)


def _launch(d: LocalDeployment, options: DeployOptions, progress: Step) -> TritonServer:
    """The server of the resolved deployment, ready to start."""
    if d.built.backend != "reference" and not options.tritonserver:
        progress("the engine and llmapi backends need tritonserver from NVIDIA's TensorRT-LLM container")
    server = server_for(
        d.recipe, d.repo, d.root, tritonserver=options.tritonserver, auto_ports=options.auto_ports
    )
    server.ready_timeout = options.ready_timeout
    server.validation = "pending" if options.validate else "skipped"  # status tells an unfinished one
    if not server.plan.mpirun:  # `sdtk restart MODEL` (one process)
        server.repo_key = secrets.token_urlsafe(24)
    progress(
        f"launching {server.binary.path} ({server.binary.source}); log: {d.root / 'logs' / 'tritonserver.log'}"
    )
    return server


def _started(
    d: LocalDeployment, server: TritonServer, result: DeployResult, options: DeployOptions, progress: Step
) -> None:
    """Record where the READY server answers in `result`, then validate it (and the burst)."""
    result.command = [server.redact(a) for a in server.command()]  # auto ports are chosen at start
    result.pid = server.pid
    result.http_url, result.grpc_url, result.metrics_url = (
        server.http_url,
        server.grpc_url,
        server.metrics_url,
    )
    progress(f"ready in {result.ready_seconds:.1f}s: {result.http_url} (model '{result.model}')")
    if not options.validate:
        return
    from toolkit.server.state import update_state
    from toolkit.validate import survive_burst, validate_deployment

    report = validate_deployment(
        http_url=result.http_url,
        grpc_url=result.grpc_url,
        model=result.model,
        recipe=d.recipe,
        progress=progress,
    )
    result.validation = report.to_dict()
    report.raise_if_failed()
    server.validation = "passed"
    if server.pid is not None:
        update_state(d.root, server.pid, validation="passed")
    if options.burst:
        build = d.recipe.build
        progress(
            survive_burst(
                server,
                decoupled=d.repo.decoupled,
                llmapi=d.repo.entry_kind == "llmapi",
                output_room=build.max_seq_len - build.max_input_len,
            )
        )


def _serve(
    d: LocalDeployment,
    server: TritonServer,
    result: DeployResult,
    options: DeployOptions,
    progress: Step,
    on_ready: Callable[[DeployResult], None] | None,
) -> DeployResult:
    """Start the watchdog of a detached server; in the foreground, serve until Ctrl-C."""
    policy = options.on_failure or "none"
    if options.detach and policy != "none":
        result.watchdog_pid = _start_watchdog(server, d.root, policy)
        progress(
            f"watchdog pid {result.watchdog_pid}: when a stub or the server dies, it will "
            f"{POLICY_TEXT[policy]} (--on-failure {policy}); log: {d.root / 'logs' / 'watchdog.log'}"
        )
    if on_ready is not None:
        on_ready(result)
    if not options.detach:
        progress("serving; press Ctrl-C to stop")
        server.serve_forever(on_failure=policy)
    return result


def _start_watchdog(server: TritonServer, root: Path, policy: str) -> int:
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
        options = DeployOptions(workdir=workdir, detach=True, auto_ports=True, validate=validate)
        result = deploy_local(recipe, options, progress, None)
        try:
            yield result
        finally:
            stop_server(result.workdir)
