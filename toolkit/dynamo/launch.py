"""`sdtk deploy RECIPE --target dynamo`: Dynamo's frontend and N workers as one supervised
deployment, with the Triton deployment's machinery: the workdir lock (toolkit.server.lock),
state.json (toolkit.server.state; `sdtk stop` SIGTERMs the recorded supervisor and SIGKILLs its
process group), `sdtk logs` (the supervisor's log names each process's own log).

READY means: the supervisor runs, every worker has registered, the frontend lists the model,
and each worker has answered one request (round-robin routing reaches all of them; with
another router mode, the frontend's listing is enough).
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from toolkit import runner
from toolkit._fs import atomic_write
from toolkit.dynamo.plan import (
    PLAN_FILE,
    PROCESSES_FILE,
    SUBDIR,
    SUPERVISOR_MODULE,
    DynamoPlan,
    DynamoPorts,
    plan_dynamo,
)
from toolkit.errors import ServerError, ToolNotFound
from toolkit.progress import Step, quiet
from toolkit.recipe import Recipe

T = TypeVar("T")
LOG_NAME = "dynamo.log"  # the supervisor's log: what `sdtk logs` shows
WARMUP_PROMPT = "def"


def dynamo_installed() -> bool:
    import importlib.util

    return (
        importlib.util.find_spec("dynamo") is not None
        and importlib.util.find_spec("dynamo.frontend") is not None
    )


def require_dynamo() -> None:
    if not dynamo_installed():
        raise ToolNotFound(
            "ai-dynamo",
            hint="scripts/setup_env.sh installs it (unless SDTK_DYNAMO=0); or pip install -e '.[dynamo]' "
            "then pip install --no-deps ai-dynamo==1.6.1 (docs/dynamo.md)",
        )


def is_dynamo(root: Path | str) -> bool:
    """The deployment recorded in `root` is a Dynamo one (state.json records its supervisor)."""
    from toolkit.server.state import read_state

    st = read_state(root)
    return st is not None and st.executable == SUPERVISOR_MODULE


def make_plan(
    recipe: Recipe,
    root: Path,
    *,
    backend: str | None,
    workers: int,
    router_mode: str | None,
    auto_ports: bool,
    dry_run: bool,
    progress: Step = quiet,
) -> DynamoPlan:
    """Build (or, `dry_run`, plan the build of) the recipe's engines and lay out the processes."""
    from toolkit.build import build
    from toolkit.server.ports import free_ports

    built = build(recipe, backend=backend, workdir=root.parent, dry_run=dry_run, progress=progress)
    if built.backend != "reference" and not dry_run:
        raise ToolNotFound(
            "tensorrt_llm",
            hint="Dynamo's TensorRT-LLM workers (python -m dynamo.trtllm) need NVIDIA's Dynamo TensorRT-LLM "
            "container; here, --dry-run prints their commands, or deploy the reference backend",
        )
    engine_dir = Path(built.outputs["target"])
    target = recipe.local_path(recipe.models.target)
    model_path = str(target) if target else str(recipe.models.target.repo)
    ports = free_ports(workers + 1) if not dry_run else [8000 + 100 + i for i in range(workers + 1)]
    http_port = ports[0] if auto_ports else recipe.serving.http_port
    plan = plan_dynamo(
        recipe,
        root,
        backend=built.backend,
        engine_dir=engine_dir,
        model_path=model_path,
        ports=DynamoPorts(http_port, tuple(ports[1:])),
        router_mode=router_mode,
    )
    if dry_run:
        plan.build_script = built.script or ""
    return plan


@dataclass(frozen=True)
class DynamoLaunch:
    """How `deploy_dynamo` runs a recipe: its backend (None: the recipe's), the workers and the
    frontend's router mode (None: the recipe's), detached or in the foreground, on free ports or the recipe's, whether
    to validate, the readiness deadline, and what the supervisor does when a process dies
    (`on_failure`, as `sdtk deploy --on-failure`)."""

    backend: str | None = None
    workers: int = 1
    router_mode: str | None = None  # None: the recipe's serving.dynamo.router_mode
    detach: bool = False
    auto_ports: bool = False
    validate: bool = True
    ready_timeout: float = 600.0
    on_failure: str = "restart"


def deploy_dynamo(
    recipe: Recipe,
    root: Path,
    launch: DynamoLaunch,
    *,
    progress: Step = quiet,
    save_recipe: Callable[[Recipe, Path], None] | None = None,
    on_ready: Callable[[DynamoPlan, dict[str, Any]], T],
) -> T:
    """Start the deployment; once READY and validated, `on_ready(plan, info)` (info: pid,
    ready_seconds, validation) makes the result returned. Foreground (not `launch.detach`): then
    serves until Ctrl-C and stops it."""
    workers, detach, validate = launch.workers, launch.detach, launch.validate
    from toolkit.server.lock import WorkdirLock
    from toolkit.server.ports import PortInUseError, bindable, port_owner
    from toolkit.server.startup import check_workdir_free

    require_dynamo()
    with WorkdirLock.acquire(root, f"sdtk deploy {recipe.display_name} --target dynamo") as lock:
        check_workdir_free(root)
        plan = make_plan(
            recipe,
            root,
            backend=launch.backend,
            workers=workers,
            router_mode=launch.router_mode,
            auto_ports=launch.auto_ports,
            dry_run=False,
            progress=progress,
        )
        if not bindable(plan.host, plan.http_port):
            raise PortInUseError("http", plan.host, plan.http_port, port_owner(plan.http_port))
        if save_recipe is not None:
            save_recipe(recipe, root)
        atomic_write(root / SUBDIR / PLAN_FILE, json.dumps(plan.to_dict(), indent=2) + "\n")
        with contextlib.suppress(FileNotFoundError):
            (root / SUBDIR / PROCESSES_FILE).unlink()
        policy = {"restart": "restart", "restart-model": "restart", "stop": "stop"}.get(
            launch.on_failure, "none"
        )
        proc = runner.spawn(
            [sys.executable, "-m", SUPERVISOR_MODULE, str(root), "--on-failure", policy],
            log_path=root / "logs" / LOG_NAME,
            cwd=root,
            pass_fds=(lock.fd,),
        )
        lock.record(server_pid=proc.pid)
        _record(plan, root, proc.pid, "starting", detach)
    progress(f"supervisor pid {proc.pid}: frontend + {workers} worker(s); log {root / 'logs' / LOG_NAME}")
    t0 = time.monotonic()
    info: dict[str, Any] = {"pid": proc.pid}
    try:
        wait_ready(plan, root, proc, launch.ready_timeout)
        info["ready_seconds"] = round(time.monotonic() - t0, 2)
        _update(root, proc.pid, status="ready", validation="pending" if validate else "skipped")
        progress(f"ready in {info['ready_seconds']:.1f}s: {plan.http_url}/v1 (model '{plan.model}')")
        if validate:
            from toolkit.dynamo.check import validate_openai

            report = validate_openai(
                http_url=plan.http_url, model=plan.model, recipe=recipe, progress=progress
            )
            info["validation"] = report.to_dict()
            report.raise_if_failed()
            _update(root, proc.pid, validation="passed")
        result = on_ready(plan, info)
    except BaseException:
        _stop(root)
        raise
    if not detach:
        progress("serving; press Ctrl-C to stop")
        from toolkit.server.foreground import signals_interrupt

        interrupted = False
        try:
            with signals_interrupt():  # SIGTERM and SIGHUP stop it as Ctrl-C does
                proc.wait()
        except KeyboardInterrupt:
            interrupted = True
        finally:
            _stop(root)
        if not interrupted:  # --on-failure stop: a process died and the supervisor stopped them all
            raise ServerError(
                f"the Dynamo deployment stopped (supervisor exit {proc.returncode})",
                hint=f"see {root / 'logs' / LOG_NAME} and the process logs beside it",
            )
    return result


def _stop(root: Path) -> None:
    from toolkit.server.state import stop_server

    stop_server(root)


def _record(plan: DynamoPlan, root: Path, pid: int, status: str, detach: bool) -> None:
    """state.json for the supervisor, as toolkit.server.state records a tritonserver: its pid and
    group, its start time (against pid reuse), its module name (what `same_process` looks for)."""
    import os

    from toolkit.server import procs
    from toolkit.server.state import ServerState, write_state

    st = procs.stat(pid)
    write_state(
        root,
        ServerState(
            pid=pid,
            pgid=pid,
            start_ticks=st.start_ticks if st else None,
            started_at=time.time(),
            http_url=plan.http_url,
            grpc_url="",
            metrics_url=f"{plan.http_url}/metrics",
            model_name=plan.model,
            model_repo=str(root / SUBDIR),
            argv=[sys.executable, "-m", SUPERVISOR_MODULE, str(root)],
            log_path=str(root / "logs" / LOG_NAME),
            workdir=str(root),
            host=plan.host,
            http_port=plan.http_port,
            executable=SUPERVISOR_MODULE,
            env=plan.frontend.env,
            detached=detach,
            owner_pid=os.getpid(),
            status=status,
        ),
    )


def _update(root: Path, pid: int, **changes: Any) -> None:
    from toolkit.server.state import update_state

    update_state(root, pid, **changes)


def processes(root: Path | str) -> dict[str, dict[str, Any]]:
    """The supervisor's record of its processes (name → pid, alive, restarts, failures, log)."""
    try:
        return dict(json.loads((Path(root) / SUBDIR / PROCESSES_FILE).read_text()))
    except (OSError, ValueError):
        return {}


def _get(url: str, timeout: float = 2.0) -> Any:
    import httpx

    try:
        r = httpx.get(url, timeout=timeout)
        return r.json() if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None


def _served_requests(metrics_url: str) -> float:
    """sdtk_spec_requests_total on a worker's /metrics (0 when unreadable)."""
    import httpx

    try:
        text = httpx.get(metrics_url, timeout=2.0).text
    except httpx.HTTPError:
        return 0.0
    total = 0.0
    for line in text.splitlines():
        if line.startswith("sdtk_spec_requests_total{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def served_counts(plan: DynamoPlan) -> dict[str, float]:
    """Requests each worker has finished (its sdtk_spec_requests_total)."""
    return {w.name: _served_requests(w.metrics_url) for w in plan.workers if w.metrics_url}


def wait_ready(plan: DynamoPlan, root: Path, proc: Any, timeout: float) -> None:
    """Until the frontend lists the model and every worker has served a request (see the module's
    docstring); ServerError with the logs' tails if the supervisor dies or time runs out."""
    from toolkit.client.openai_api import OpenAIClient
    from toolkit.errors import SdtkError

    deadline = time.monotonic() + timeout
    listed = False
    with OpenAIClient(plan.http_url, plan.model, timeout=60) as c:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise ServerError(
                    f"the Dynamo supervisor exited ({proc.returncode}) before READY",
                    hint=f"see {root / 'logs'}: " + _tails(plan),
                )
            failed = {n: p["failures"][-1] for n, p in processes(root).items() if p.get("failures")}
            if failed:  # a process that dies before READY would die again: no restart loop here
                raise ServerError(
                    "a Dynamo process died before READY: " + "; ".join(failed.values()),
                    hint=f"see {root / 'logs'}: " + _tails(plan),
                )
            if not listed:
                data = _get(f"{plan.http_url}/v1/models")
                listed = bool(data) and plan.model in [m.get("id") for m in data.get("data", [])]
                if not listed:
                    time.sleep(0.5)
                    continue
            counts = served_counts(plan)
            if all(v > 0 for v in counts.values()) or plan.router_mode != "round-robin":
                return
            with contextlib.suppress(SdtkError):
                c.complete(WARMUP_PROMPT, 1)
            time.sleep(0.2)
    raise ServerError(
        f"the Dynamo deployment was not READY in {timeout:.0f}s (model listed: {listed})",
        hint=f"see {root / 'logs'}: " + _tails(plan),
    )


def _tails(plan: DynamoPlan) -> str:
    from toolkit.server import logscan

    out = []
    for p in plan.processes:
        prev = Path(p.log + ".prev")  # a restarted process's previous log: where it died
        tail = logscan.tail(prev if prev.is_file() else p.log, 3).strip().replace("\n", " | ")
        if tail:
            out.append(f"[{p.name}] {tail[-300:]}")
    return " ".join(out)
