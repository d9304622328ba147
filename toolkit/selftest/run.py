"""The self-test's run: for every (mode, backend) the installed TensorRT-LLM supports (or, without
it, the reference backend standing in for the newest verified container's TensorRT-LLM, 1.2.1), build → deploy → validate → bench →
stop, and the pass/fail table."""

from __future__ import annotations

import contextlib
import tempfile
import time
import traceback
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from toolkit import compat
from toolkit import progress as prog
from toolkit.bench.api import bench
from toolkit.build import build
from toolkit.build.llmapi import schema_for
from toolkit.containers.images import DEFAULT_TRTLLM
from toolkit.deploy import DeployOptions, deploy
from toolkit.errors import UsageError
from toolkit.modes import REGISTRY, SelfTest, info
from toolkit.modes.core import ENGINE_DEPRECATION, ENGINE_REMOVAL
from toolkit.recipe import parse_recipe
from toolkit.selftest.checkpoints import (
    CAPTURE,
    MIN_MARGIN,
    PROMPTS,
    VALIDATE_TOKENS,
    check_margins,
    make_checkpoints,
)
from toolkit.server.state import server_status, stop_server
from toolkit.validate import ValidateOptions, validate_deployment

STEPS = ("build", "deploy", "validate", "bench", "stop")
# The TensorRT-LLM the CPU twin stands in for without TensorRT-LLM: the one the newest verified NGC
# container carries (toolkit.containers.images.DEFAULT_TRTLLM: 1.2.1, 26.07), whose contract fixture
# the twin is checked against (tests/contracts/trtllm-1.2.json): the engine path there is deprecated
# (NVIDIA/TensorRT-LLM PR #11723) but still ships, so both paths' modes run.
WOULD_RUN = DEFAULT_TRTLLM


@dataclass
class ModeResult:
    mode: str
    backend: str
    steps: dict[str, str] = field(default_factory=dict)  # step → passed | failed | skipped
    failed_step: str | None = None
    error: str | None = None
    log_tail: str = ""
    seconds: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.failed_step is None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


@dataclass
class SelftestResult:
    trtllm_version: str | None
    backends: list[str]
    note: str
    checkpoints: dict[str, str]
    results: list[ModeResult]
    would_run: list[dict[str, str]]  # what a TensorRT-LLM install would run (documented in --json)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "trtllm_version": self.trtllm_version,
            "backends": self.backends,
            "note": self.note,
            "checkpoints": self.checkpoints,
            "results": [r.to_dict() for r in self.results],
            "would_run_with_trtllm": self.would_run,
        }

    def table(self) -> str:
        head = f"{'mode':<13} {'backend':<17} " + " ".join(f"{s:<9}" for s in STEPS) + " time"
        lines = [head, "-" * len(head)]
        for r in self.results:
            cells = " ".join(f"{r.steps.get(s, '-'):<9}" for s in STEPS)
            lines.append(f"{r.mode:<13} {r.backend:<17} {cells} {r.seconds:.0f}s")
        for r in self.results:
            if not r.ok:
                lines += ["", f"{r.mode} ({r.backend}) failed at {r.failed_step}: {r.error}"]
                if r.log_tail:
                    lines += ["  " + x for x in r.log_tail.splitlines()[-20:]]
        return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- plan


def _selftest(mode: str) -> SelfTest:
    """The mode's self-test facts (its ModeInfo's); a mode the self-test leaves out is an error."""
    found = info(mode).selftest
    if found is None:
        raise UsageError(
            f"the self-test does not deploy mode {mode}",
            hint="its modes are: " + ", ".join(m.name for m in REGISTRY if m.selftest is not None),
        )
    return found


REFERENCE_LLMAPI = "reference-llmapi"  # the reference backend serving the llmapi repository


def _reference(backend: str) -> bool:
    return backend in ("reference", REFERENCE_LLMAPI)


def selftest_recipe(mode: str, backend: str, paths: dict[str, Path], version: str | None) -> Any:
    """`backend`: engine | llmapi | reference | reference-llmapi (the reference backend behind the
    llmapi repository: serving.repository llmapi)."""
    cell = _selftest(mode)
    models: dict[str, Any] = {"target": {"path": str(paths[cell.target])}}
    source = info(mode).source
    if source is not None:
        models[source] = {"path": str(paths[source])}
    # 1.0's EagleDecodingConfig has no eagle3_layers_to_capture; CAPTURE is its default anyway.
    without = backend == "llmapi" and version is not None and not schema_for(version).tree_fields
    spec = cell.spec(mode, None if without else CAPTURE)
    data: dict[str, Any] = {
        "name": f"selftest-{backend}-{mode}".replace("_", "-"),
        "backend": "reference" if _reference(backend) else backend,
        "models": models,
        "speculative": spec,
        "dtype": "float32" if _reference(backend) else (cell.dtype or "float16"),
        "build": {"max_batch_size": 2, "max_input_len": 128, "max_seq_len": 256, "max_num_tokens": 512},
        # A two-model mode's BLS and both LLM models are non-decoupled on the GPU path, and so on its twin.
        "serving": {"decoupled": not (backend in ("engine", "reference") and info(mode).two_model)},
    }
    if backend == REFERENCE_LLMAPI:
        data["serving"]["repository"] = "llmapi"
    if not _reference(backend):  # the baseline deployment runs alongside: leave GPU memory for both
        data["serving"]["kv_cache_free_gpu_mem_fraction"] = 0.2
    # The twin declares the version it stands in for, so that it serves that version's repository.
    data["trtllm_version"] = version if version is not None else WOULD_RUN
    return parse_recipe(data)


def plan_modes(version: str | None, stand_in: str = WOULD_RUN) -> list[tuple[str, str]]:
    """(mode, backend) pairs to test: what the installed TensorRT-LLM supports; without it, what
    TensorRT-LLM `stand_in` (default WOULD_RUN, 1.2.1) would run, on the reference backend (the engine
    path's modes behind the ensemble repository, the llmapi path's behind the llmapi one)."""
    if version is None:
        return [(m, "reference" if b == "engine" else REFERENCE_LLMAPI) for m, b in plan_modes(stand_in)]
    # The support matrix decides, on the release tuple and the family of the cell's target: the
    # engine path through 1.2.x (deprecated on 1.2.x), none on the 1.3 line; the llmapi path from 1.0,
    # each mode from its own first release (SA: the 1.3 line; PARD: 1.3.0rc7).
    out = [
        (m.name, b, m.selftest.family)
        for b in ("engine", "llmapi")
        for m in REGISTRY
        if m.selftest and b in m.selftest.paths
    ]
    return [(m, b) for m, b, family in out if not compat.problems(compat.cell(m, b), version, family)]


def engine_notes(version: str | None) -> list[str]:
    """What the support matrix says about the engine path on this TensorRT-LLM: its deprecation
    (1.2.x, NVIDIA/TensorRT-LLM PR #11723) or its removal (1.3, PRs #15907/#15918) and the fix-it."""
    if version is None:
        return []
    engine = compat.cell("none", "engine")
    if compat.removed(engine, version):
        return [
            f"TensorRT-LLM {version}: no engine-path rows ({ENGINE_REMOVAL}); Medusa, Lookahead and EAGLE-1/2 "
            "have no GPU path here: EAGLE-3, NGram and SA (llmapi) replace them"
        ]
    if compat.warnings(engine, version):
        return [f"TensorRT-LLM {version}: {ENGINE_DEPRECATION}; the engine rows below still run, deprecated"]
    return []


# --------------------------------------------------------------------------- run


def _tail(e: BaseException) -> str:
    tail = getattr(e, "log_tail", "") or ""
    log_path = getattr(e, "log_path", None)
    if not tail and log_path:
        with contextlib.suppress(OSError):
            tail = "\n".join(Path(log_path).read_text(errors="replace").splitlines()[-30:])
    return tail


def run_mode(
    mode: str,
    backend: str,
    recipe: Any,
    workdir: Path,
    *,
    baseline_url: str | None = None,
    bench_requests: int = 2,
    keep: bool = False,
    progress: prog.Step,
) -> tuple[ModeResult, Any]:
    """Build → deploy → validate → bench → stop one mode (`recipe`: its selftest_recipe). Returns
    the result and, with `keep`, the running deployment (the baseline others validate against)."""
    res = ModeResult(mode, backend)
    t0 = time.monotonic()
    deployed = None
    step = "build"
    try:
        progress(f"{mode} ({backend}): build")
        build(recipe, workdir=workdir, progress=prog.quiet)
        res.steps["build"] = "passed"
        step = "deploy"
        progress(f"{mode} ({backend}): deploy")
        deployed = deploy(
            recipe,
            DeployOptions(workdir=workdir, detach=True, auto_ports=True, validate=False),
            progress=prog.quiet,
        )
        res.steps["deploy"] = "passed"
        res.details["ready_seconds"] = deployed.ready_seconds
        # A detached deploy returns only once the server is READY at these addresses.
        assert deployed.http_url is not None and deployed.grpc_url is not None
        step = "validate"
        progress(f"{mode} ({backend}): validate")
        report = validate_deployment(
            http_url=deployed.http_url,
            grpc_url=deployed.grpc_url,
            model=deployed.model,
            recipe=recipe,
            options=ValidateOptions(prompts=PROMPTS, max_tokens=VALIDATE_TOKENS, baseline_url=baseline_url),
            progress=None,
        )
        res.details["validation"] = report.to_dict()
        failed = [c for c in report.checks if c.status == "failed"]
        if failed:
            raise RuntimeError("; ".join(f"{c.name}: {c.detail}" for c in failed))
        correctness = next((c for c in report.checks if c.name == "correctness"), None)
        if correctness is None or correctness.status != "passed":
            raise RuntimeError(f"no correctness verdict (baseline: {report.baseline})")
        res.steps["validate"] = "passed"
        step = "bench"
        progress(f"{mode} ({backend}): bench")

        # The deployment, not its URL: the llmapi model (and the C++ tensorrt_llm model up to
        # TensorRT-LLM 1.1) returns no token counts, so the recipe's tokenizer counts them.
        b = bench(
            deployed.workdir,
            model=deployed.model,
            concurrency=(1,),
            requests=bench_requests,
            warmup=0,
            max_tokens=8,
            report_dir=deployed.workdir / "reports" / "selftest",
            progress=False,
        )
        res.details["bench_report"] = str(b.report_dir)
        res.details["bench_token_counts"] = sorted(
            {str(r.token_count_source) for lv in b.levels for r in lv.records if r.ok}
        )
        res.steps["bench"] = "passed"
    except BaseException as e:  # noqa: BLE001 - every failure is one row of the table
        if isinstance(e, KeyboardInterrupt):
            if deployed is not None:
                stop_server(deployed.workdir)
            raise
        res.steps[step] = "failed"
        res.failed_step = step
        res.error = str(e) or type(e).__name__
        res.log_tail = _tail(e)
        if not res.log_tail and deployed is not None:
            log = deployed.workdir / "logs" / "tritonserver.log"
            with contextlib.suppress(OSError):
                res.log_tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        if not res.log_tail:
            res.log_tail = "".join(traceback.format_exception_only(type(e), e))
    finally:
        if deployed is not None and not (keep and res.ok):
            stop_server(deployed.workdir)
            stopped = not server_status(deployed.workdir, timeout=1.0).running
            res.steps["stop"] = "passed" if stopped else "failed"
            if not stopped and res.failed_step is None:
                res.failed_step, res.error = "stop", f"the server in {deployed.workdir} still runs"
        for s in STEPS:
            res.steps.setdefault(s, "skipped")
        res.seconds = round(time.monotonic() - t0, 1)
    return res, (deployed if keep and res.ok else None)


def selftest(
    *,
    modes: Sequence[str] | None = None,
    workdir: Path | None = None,
    force_reference: bool = False,
    bench_requests: int = 2,
    progress: prog.Step | None = None,
    stand_in: str | None = None,
) -> SelftestResult:
    """Run the self-test; see the module docstring. `modes` limits the modes (CI runs two).
    `stand_in`: on the reference backend, the TensorRT-LLM version whose cells it runs (default
    WOULD_RUN, 1.2.1; 1.3.0 adds the 1.3 line's SA and PARD)."""
    say = progress or prog.steps("selftest")
    version = None if force_reference else compat.installed_trtllm_version()
    if stand_in is not None and version is not None:
        raise UsageError(
            f"--stand-in picks the reference backend's cells, but TensorRT-LLM {version} is installed: "
            "its own cells run",
            hint="add --reference to run the reference backend",
        )
    twin = stand_in or WOULD_RUN
    if version is None:
        note = (
            "TensorRT-LLM is not installed: running the same flow on the reference backend (CPU), with "
            f"the cells TensorRT-LLM {twin} has. Inside NVIDIA's tritonserver:<yy.mm>-trtllm-python-py3 "
            "container this runs the engine and llmapi backends instead (see would_run_with_trtllm)."
        )
    else:
        note = "; ".join([f"TensorRT-LLM {version}: testing every mode it supports", *engine_notes(version)])
    say(note)
    plan = plan_modes(version, twin)
    if modes:
        unknown = sorted(set(modes) - {m for m, _ in plan})
        if unknown:
            raise UsageError(
                f"mode(s) {', '.join(unknown)} not testable here",
                hint="choose from "
                + ", ".join(sorted({m for m, _ in plan}))
                + (
                    ""
                    if version
                    else f" (the cells of TensorRT-LLM {twin}; --stand-in picks another version)"
                ),
            )
        # engine/llmapi: the `none` deployment is the correctness baseline; the reference backend's
        # baseline is its in-process runtime
        plan = [(m, b) for m, b in plan if m in modes or (m == "none" and not _reference(b))]
    would_run = [{"mode": m, "backend": b} for m, b in plan_modes(twin)]
    with contextlib.ExitStack() as stack:
        root = workdir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sdtk-selftest-")))
        root = Path(root).resolve()
        say(f"writing random-weight checkpoints under {root / 'checkpoints'}")
        paths = make_checkpoints(root / "checkpoints")
        for role in sorted({_selftest(m).target for m, _ in plan}):
            margins = check_margins(paths[role])
            say(
                f"{role}'s smallest greedy margin: {margins.min_margin:.2f} of max|logit| (at least {MIN_MARGIN})"
            )
        results: list[ModeResult] = []
        baselines: dict[str, Any] = {}
        try:
            # The same backend's plain deployment is the correctness baseline of its speculative modes.
            for mode, backend in sorted(plan, key=lambda p: p[0] != "none"):
                base = baselines.get(backend)
                needs_url = not _reference(backend) and mode != "none"
                res, kept = run_mode(
                    mode,
                    backend,
                    selftest_recipe(mode, backend, paths, version or twin),
                    root / "work",
                    baseline_url=base.http_url if (needs_url and base is not None) else None,
                    bench_requests=bench_requests,
                    keep=mode == "none" and not _reference(backend),
                    progress=say,
                )
                if kept is not None:
                    baselines[backend] = kept
                results.append(res)
                say(f"{mode} ({backend}): {'passed' if res.ok else 'FAILED at ' + str(res.failed_step)}")
        finally:
            for d in baselines.values():
                stop_server(d.workdir)
        return SelftestResult(
            trtllm_version=version,
            backends=sorted({b for _, b in plan}),
            note=note,
            checkpoints={k: str(v) for k, v in paths.items()},
            results=results,
            would_run=would_run,
        )
