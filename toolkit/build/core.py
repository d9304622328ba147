"""`sdtk build`: from a recipe to TensorRT-LLM artifacts (engine, llmapi) or reference engine dirs.

    build(recipe, backend=None, workdir=None, dry_run=False) -> BuildResult

1. Backend: `compat` decides, with the installed TensorRT-LLM winning over the recipe's
   `trtllm_version`. A GPU backend without TensorRT-LLM fails at once unless it is a dry run;
   `backend: auto` without TensorRT-LLM builds the reference backend (a dry run plans for GPUs).
2. Sources: every checkpoint is resolved through huggingface_hub (a dry run fetches configs and
   tokenizers at most, never weights) and inspected; the catalogue fills in what is unresolved.
3. Preflight: all checks run, every record goes into the result; failures raise PreflightFailed.
4. Plan: the backend's steps. A dry run renders them as a runnable bash script (the runbook);
   otherwise they run stamped and atomically (toolkit.build.steps) and `build.json` is written.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import shlex
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from toolkit import __version__, compat, containers, modes
from toolkit import progress as prog
from toolkit._fs import atomic_write
from toolkit.build import engine, llmapi, preflight, reference
from toolkit.build.context import EXAMPLES_ENV, BuildContext
from toolkit.build.preflight import PASSED, SKIPPED, CheckResult
from toolkit.build.steps import Step, StepRecord, execute, render_script
from toolkit.checks import WARNING
from toolkit.errors import CompatError, PreflightError
from toolkit.hub import Resolved, hub_settings, resolve
from toolkit.recipe import MODE_SOURCES, Recipe, load_recipe
from toolkit.runner import redact

Progress = prog.Step

_CONTAINER_HINT = (
    "run inside the TensorRT-LLM container (nvcr.io/nvidia/tritonserver:<yy.mm>-trtllm-python-py3 or "
    "nvcr.io/nvidia/tensorrt-llm/release), or add --dry-run to print the runbook, or use --backend reference"
)


@dataclass
class BuildResult:
    recipe: str
    recipe_path: str | None
    mode: str
    backend: str
    backend_why: str
    trtllm_version: str | None
    version_source: str
    # The support matrix's answer the build ran with (backend, backend_why, trtllm_version and
    # version_source above are its fields): deploy hands it to render instead of asking again.
    resolution: compat.Resolution = field(repr=False, compare=False)
    dry_run: bool
    root: Path
    outputs: dict[str, str]
    sources: list[dict]
    preflight: list[dict]
    steps: list[dict]
    commands: list[list[str]]
    dtype: str
    dtype_source: str
    hub: dict
    notes: list[str] = field(default_factory=list)
    llmapi: dict | None = None
    script: str | None = None
    build_json: str | None = None
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return {
            "recipe": self.recipe,
            "recipe_path": self.recipe_path,
            "mode": self.mode,
            "backend": self.backend,
            "backend_why": self.backend_why,
            "trtllm_version": self.trtllm_version,
            "version_source": self.version_source,
            "dry_run": self.dry_run,
            "workdir": str(self.root),
            "outputs": self.outputs,
            "dtype": self.dtype,
            "dtype_source": self.dtype_source,
            "hub": self.hub,
            "sources": self.sources,
            "preflight": self.preflight,
            "steps": self.steps,
            "commands": self.commands,
            "llmapi": self.llmapi,
            "notes": self.notes,
            "script": self.script,
            "build_json": self.build_json,
            "seconds": round(self.seconds, 3),
        }


def stderr_progress() -> Progress:
    """Progress lines to the `sdtk.build` logger (stderr under the CLI; data stays on stdout)."""
    return prog.steps("build")


# --------------------------------------------------------------------------- backend


def choose_backend(recipe: Recipe, *, dry_run: bool, installed: str | None) -> compat.Resolution:
    """compat's choice, plus: auto without TensorRT-LLM (not a dry run) → reference."""
    if recipe.backend == "auto" and installed is None and not dry_run:
        cell = compat.cell(recipe.mode, "reference")
        if cell.supported:
            return compat.Resolution(
                cell, None, "none",
                f"auto → reference: TensorRT-LLM is not installed ({cell.reason}); "
                "add --dry-run to plan the GPU build instead",
            )  # fmt: skip
    return compat.check_recipe(recipe, installed_version=installed)


def _backend_error(e: CompatError) -> PreflightError:
    return PreflightError("backend", str(e), hint=e.hint)


# --------------------------------------------------------------------------- sources


def _fetch_level(ctx: BuildContext, role: str) -> str:
    if ctx.dry_run:
        return "metadata"
    if ctx.backend in ("engine", "reference"):
        return "metadata" if role == "tokenizer" else "full"
    # llmapi: TensorRT-LLM downloads what it serves; sdtk needs configs/tokenizers for preflight,
    # and whole directories only where the version wants a local speculative_model_dir.
    # The sources an llmapi mode hands TensorRT-LLM as its speculative model.
    speculative = {m.source for m in modes.REGISTRY if m.llmapi.supported and m.source is not None}
    if role in speculative and not llmapi.schema_for(ctx.version).hub_ids:
        return "full"
    return "metadata"


def _needs(ctx: BuildContext) -> dict[str, str | None]:
    if ctx.dry_run:
        return {}
    return {role: ("weights" if _fetch_level(ctx, role) == "full" else "files") for role in ctx.sources}


def _roles(recipe: Recipe) -> list[str]:
    roles = ["target"]
    need = MODE_SOURCES[recipe.mode]
    if need is not None:
        roles.append(need)
    if recipe.models.tokenizer is not None:
        roles.append("tokenizer")
    return roles


def _resolve_sources(ctx: BuildContext, progress: Progress) -> None:
    for role in _roles(ctx.recipe):
        src = getattr(ctx.recipe.models, role)
        level = _fetch_level(ctx, role)
        how = "cache only" if hub_settings().offline else level
        if src.gguf is not None:  # converted here, on this machine: nothing is downloaded
            level = "metadata" if ctx.dry_run else "full"
            how = (
                "a GGUF file: converted once, then from sdtk's cache" if not ctx.dry_run else "GGUF, dry run"
            )
        progress(f"resolving {role} {src.describe()} ({how})")
        r: Resolved = resolve(src, role=role, recipe=ctx.recipe, fetch=level)  # type: ignore[arg-type]
        where = (
            f"{r.path}" + (f" @ {r.commit[:12]}" if r.commit else "")
            if r.resolved
            else f"unresolved: {r.reason}"
        )
        progress(f"  {role}: {where}; facts from {r.facts.source}")
        if r.provenance is not None:
            progress(f"  {role}: {r.provenance.note}")
            ctx.notes.append(f"{role}: {r.provenance.note}")
        ctx.sources[role] = r


def _dtype(ctx: BuildContext) -> None:
    if ctx.recipe.dtype != "auto":
        ctx.dtype, ctx.dtype_source = ctx.recipe.dtype, "recipe"
        return
    if ctx.backend == "reference":
        # The reference runtime's exact default; bfloat16/float16 only when the recipe asks.
        ctx.dtype, ctx.dtype_source = "float32", "reference backend default"
        return
    f = ctx.sources["target"].facts
    if f.dtype in ("float16", "bfloat16", "float32"):
        ctx.dtype, ctx.dtype_source = f.dtype, f"target {f.source}"
    else:
        ctx.dtype, ctx.dtype_source = "float16", "default (target dtype unknown)"


def planned_context(
    recipe: Recipe, *, workdir: Path | str | None = None, progress: Progress | None = None
) -> BuildContext:
    """The context a dry-run build of `recipe` plans with (backend, version, resolved sources,
    dtype), its preflight passed (PreflightFailed otherwise): for renderers that write a build's
    files for another machine (the Dynamo DynamoGraphDeployment's engine YAML)."""
    say = progress or (lambda _msg: None)
    ctx, runtime = _context(recipe, workdir, True, None, None)
    _resolve_sources(ctx, say)
    _dtype(ctx)
    _preflight(ctx, runtime, say)
    return ctx


# --------------------------------------------------------------------------- the build


def build(
    recipe: Recipe | str | Path,
    *,
    backend: str | None = None,
    workdir: Path | str | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
    container: str | None = None,
    container_root: Path | str | None = None,
) -> BuildResult:
    """Build the artifacts of one recipe (or, with dry_run, plan them and return the runbook).

    `backend` overrides the recipe's (auto|engine|llmapi|reference); `workdir` defaults to
    ./workdir; outputs go to <workdir>/<recipe name>/engines/{target,draft}. Scripts are looked for
    in the layout of `container` (<yy.mm>; default: toolkit.containers.layout's choice), under
    `container_root` when given (a directory tree standing in for the container). Raises
    PreflightError (incl. PreflightFailed), StepFailed, ToolNotFound or RecipeError.
    """
    t0 = time.monotonic()
    say = progress or stderr_progress()
    if not isinstance(recipe, Recipe):
        recipe = load_recipe(recipe)
    if backend is not None and backend != recipe.backend:
        recipe = recipe.model_copy(update={"backend": backend})  # keeps the recipe's path (private attr)

    # 1. backend and runtime: fail in well under a second when TensorRT-LLM is missing.
    ctx, runtime = _context(recipe, workdir, dry_run, container, container_root)
    say(f"{ctx.name}: {recipe.mode} on {ctx.backend} ({ctx.why})")

    # 2. sources and facts.
    _resolve_sources(ctx, say)
    _dtype(ctx)

    # 3. preflight.
    results = _preflight(ctx, runtime, say)

    # 4. plan.
    steps = {"engine": engine.plan, "llmapi": llmapi.plan, "reference": reference.plan}[ctx.backend](ctx)
    result = _result(ctx, steps, results)
    if dry_run:
        result.script = runbook(ctx, steps, results)
        result.steps = [{**s.to_dict(), "status": "planned"} for s in steps]
        result.seconds = time.monotonic() - t0
        return result

    # 5. run.
    _run(ctx, steps, result, t0, say)
    return result


def _context(
    recipe: Recipe,
    workdir: Path | str | None,
    dry_run: bool,
    container: str | None,
    container_root: Path | str | None,
) -> tuple[BuildContext, CheckResult]:
    """The build's context (backend, versions, output root, container layout) and the runtime
    check; a GPU backend without TensorRT-LLM fails here unless it is a dry run."""
    installed = compat.installed_trtllm_version()
    try:
        res = choose_backend(recipe, dry_run=dry_run, installed=installed)
    except CompatError as e:
        raise _backend_error(e) from None
    if res.backend in compat.GPU_BACKENDS and installed is None and not dry_run:
        raise PreflightError(
            "runtime",
            f"backend '{res.backend}' needs TensorRT-LLM, which is not installed in {sys.executable}",
            hint=_CONTAINER_HINT,
        )
    runtime = (
        CheckResult("runtime", PASSED, f"TensorRT-LLM {installed} installed")
        if installed
        else CheckResult(
            "runtime",
            SKIPPED,
            "skipped (dry run: TensorRT-LLM not installed, planning only)"
            if dry_run
            else f"TensorRT-LLM not needed by backend {res.backend}",
        )  # fmt: skip
    )
    name = recipe.display_name
    root = (Path(workdir) if workdir is not None else Path("workdir")).expanduser().resolve() / name
    ctx = BuildContext(
        recipe=recipe,
        name=name,
        dry_run=dry_run,
        resolution=res,
        installed_version=installed,
        root=root,
        container=containers.layout(trtllm_version=res.version, container=container, root=container_root),
    )
    return ctx, runtime


def _preflight(ctx: BuildContext, runtime: CheckResult, say: Progress) -> list[CheckResult]:
    """Every preflight check, each reported unless it passed; PreflightFailed if any failed."""
    results: list[CheckResult] = [runtime]
    try:
        # The backend was resolved once (_context); only the target's model family is new here.
        if ctx.backend != "reference":
            ctx.resolution.check_family(ctx.sources["target"].facts.model_type)
        # A deprecated path (the engine path on TensorRT-LLM 1.2.x) runs, with a warning.
        results.append(CheckResult("backend", WARNING if ctx.resolution.warnings else PASSED, ctx.why))
    except CompatError as e:
        results.append(CheckResult("backend", preflight.FAILED, str(e), e.hint))
    results += preflight.check_sources(ctx, _needs(ctx))
    gpus = preflight.visible_gpus() if ctx.backend in compat.GPU_BACKENDS and not ctx.dry_run else None
    results += preflight.run_checks(ctx, gpus=gpus)
    if ctx.backend == "engine":
        results += engine.check_converter(ctx)
        results.append(engine.check_trtllm_build(ctx))
    if ctx.recipe.repository_layout(ctx.backend) == "llmapi":
        # the twin of the llmapi layout writes the same LLM-API options: the same version check
        results.append(llmapi.check_fields(ctx))
    for r in results:
        if r.status != PASSED:
            status = "" if r.detail.startswith(r.status) else f"{r.status}: "
            say(f"  preflight {r.name}: {status}{r.detail}")
    preflight.raise_failures(results)
    say(
        f"preflight: {sum(r.status == PASSED for r in results)} passed, "
        f"{sum(r.status == SKIPPED for r in results)} skipped"
    )
    return results


def _result(ctx: BuildContext, steps: list[Step], results: list[CheckResult]) -> BuildResult:
    """The build's result as planned: outputs, commands, sources, preflight (no step has run)."""
    recipe = ctx.recipe
    outputs = {s.dest.name: str(s.dest) for s in steps if s.dest.parent == ctx.engines}
    commands = [s.argv for s in steps if s.argv is not None]
    llm = None
    if ctx.backend == "llmapi":
        sc = llmapi.schema(ctx)
        llm = {
            "schema": sc.to_dict(),
            "serve_command": llmapi.serve_argv(ctx),
            "extra_llm_api_options": llmapi.files(ctx)[llmapi.EXTRA_OPTIONS],
            "model_yaml": llmapi.files(ctx)[llmapi.MODEL_YAML],
        }
        commands.append(llmapi.serve_argv(ctx))
    if ctx.backend == "engine":
        ex = ctx.examples()
        ctx.notes.append(f"converter scripts under {ex.path} ({ex.why})")
    return BuildResult(
        recipe=ctx.name,
        recipe_path=str(recipe.source_path) if recipe.source_path else None,
        mode=recipe.mode,
        backend=ctx.backend,
        backend_why=ctx.why,
        trtllm_version=ctx.version,
        version_source=ctx.version_source,
        resolution=ctx.resolution,
        dry_run=ctx.dry_run,
        root=ctx.root,
        outputs=outputs,
        sources=[r.to_dict() for r in ctx.sources.values()],
        preflight=[r.to_dict() for r in results],
        steps=[],
        commands=commands,
        dtype=ctx.dtype,
        dtype_source=ctx.dtype_source,
        hub=hub_settings().to_dict(),
        notes=ctx.notes,
        llmapi=llm,
    )


def _run(ctx: BuildContext, steps: list[Step], result: BuildResult, t0: float, say: Progress) -> None:
    """Run the steps under the build's lock and write build.json (the result, plus when and by what)."""
    root = ctx.root
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    root.mkdir(parents=True, exist_ok=True)
    extra = {
        "trtllm": ctx.installed_version,
        "backend": ctx.backend,
        "sources": {r.role: [r.ref, r.commit] for r in ctx.sources.values()},
    }
    with _lock(root):
        records: list[StepRecord] = execute(steps, log_dir=ctx.logs, extra=extra, progress=say)
    result.steps = [r.to_dict() for r in records]
    result.seconds = time.monotonic() - t0
    summary = {
        **result.to_dict(),
        "sdtk_version": __version__,
        "started": started,
        "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    summary.pop("script", None)
    build_json = root / "build.json"
    summary["build_json"] = str(build_json)
    atomic_write(build_json, redact(json.dumps(summary, indent=2, default=str)) + "\n")
    result.build_json = str(build_json)
    ran = sum(r.status == "ran" for r in records)
    say(f"done: {ran} step(s) ran, {len(records) - ran} up to date; summary in {build_json}")


@contextlib.contextmanager
def _lock(root: Path) -> Iterator[None]:
    """One build at a time per output directory (an flock, released even by kill -9)."""
    fh = (root / ".sdtk-build.lock").open("w")
    try:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise PreflightError(
                "lock",
                f"another sdtk build is running in {root}",
                hint="wait for it, or use another --workdir",
            ) from None
        yield
    finally:
        fh.close()


# --------------------------------------------------------------------------- the runbook


def runbook(ctx: BuildContext, steps: list[Step], results: list[CheckResult]) -> str:
    """The plan as a bash script: `set -euo pipefail`, variables, one commented block per step."""
    ex = ctx.examples()
    variables: list[tuple[str, str, str]] = []
    prefixes: dict[str, str] = {}
    if ctx.backend == "engine":
        variables.append(
            (EXAMPLES_ENV, f'"${{{EXAMPLES_ENV}:-{ex.path}}}"',
             f"TensorRT-LLM examples (convert_checkpoint.py scripts) of container {ctx.container.container}")
        )  # fmt: skip
        prefixes[str(ex.path)] = EXAMPLES_ENV
    for var in ctx.script_vars.values():
        variables.append((var.name, var.expr, var.comment))
    skipped = [r for r in results if r.status == SKIPPED]
    header = [
        f"sdtk build runbook: {ctx.name} ({ctx.mode} on {ctx.backend}), generated by sdtk {__version__}",
        f"recipe: {ctx.recipe.source_path or '<in memory>'}",
        f"backend: {ctx.why}",
        f"dtype: {ctx.dtype} ({ctx.dtype_source})",
        "outputs: " + ", ".join(str(s.dest) for s in steps if s.dest.parent == ctx.engines),
    ]
    if ctx.backend == "engine":
        header.append(f"converter scripts: {ex.path} ({ex.why})")
    if ctx.backend == "llmapi":  # the field names written below, from the same table as the YAML's
        header.append(f"speculative_config field names: {llmapi.schema(ctx).why}")
    if skipped:
        header.append("preflight checks skipped in this plan (rerun without --dry-run to check them):")
        header += [f"  {r.name}: {r.detail}" for r in skipped]
    footer: list[str] = []
    if ctx.backend == "llmapi":
        footer = [
            "serve it with TensorRT-LLM directly (sdtk deploy does the Triton equivalent):",
            "  " + shlex.join(llmapi.serve_argv(ctx)),
        ]
    elif ctx.backend == "engine":
        footer = [
            "sdtk skips finished steps on a rerun; this script does not: rerun it from the failed step."
        ]
    return render_script(
        header=header,
        variables=variables,
        needs_fetch=any(v.needs_fetch for v in ctx.script_vars.values()),
        steps=steps,
        prefixes=prefixes,
        footer=footer,
    )
