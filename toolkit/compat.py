"""The support matrix: speculative mode × backend × TensorRT-LLM version × model family.

Facts come from NVIDIA/TensorRT-LLM (`tensorrt_llm/commands/build.py`, `tensorrt_llm/llmapi/llm_args.py`
`supports_backend` per version, `docs/source/legacy/tensorrt-backend-removal.md` @335107a) and the PRs
named below:
- the engine path (`trtllm-build`, Triton `tensorrtllm` C++ backend) ships through TRT-LLM 1.2.x,
  deprecated on 1.2.x (NVIDIA/TensorRT-LLM PR #11723), removed in the 1.3 line (PRs #15907, #15918),
  and is the only home of Medusa, Lookahead and EAGLE-1/2: on 1.3 they have no GPU path;
- the PyTorch/LLM-API path starts at 1.0 and is the only home of EAGLE-3 and NGram;
- draft-target exists on both;
- the reference backend (sdtk's PyTorch implementation) runs everything, without TRT-LLM.
Versions compare on the release tuple (toolkit.containers.release): 1.2.0rc2 is a 1.2.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING

from toolkit import containers
from toolkit.containers import probe, release
from toolkit.errors import CompatError
from toolkit.modes import BY_NAME, ENGINE_MAX, LLMAPI_MIN, REGISTRY, ModeInfo, info
from toolkit.modes.core import ENGINE_DEPRECATED, ENGINE_DEPRECATION, ENGINE_REMOVAL

if TYPE_CHECKING:
    from toolkit.recipe import Recipe

GPU_BACKENDS = ("engine", "llmapi")
# The release lines `sdtk compat` shows a column for.
COLUMNS = ("1.1", "1.2", "1.3")


def keep_engine() -> str:
    """Where the engine path still runs: the newest known container whose TensorRT-LLM has it."""
    last = [c for c in containers.all_facts().values() if release.below(c.trtllm_version.value, ENGINE_MAX)]
    where = f" (NGC {last[-1].image} carries {last[-1].trtllm_version.value}, deprecated)" if last else ""
    return f"or keep backend: engine on TensorRT-LLM < {ENGINE_MAX}{where}"


def _engine_limits(recipe: Recipe) -> None:
    """The mode's engine limits (ModeInfo.engine_limits): pipeline parallelism, max_batch_size."""
    lim = info(recipe.mode).engine_limits
    if lim is None:
        return
    if not lim.pipeline_parallel and recipe.parallel.pp != 1:
        raise CompatError(
            f"{lim.label} engines do not support pipeline parallelism (parallel.pp={recipe.parallel.pp})",
            mode=recipe.mode,
            backend="engine",
            hint="set parallel.pp: 1 and use tp instead",
        )
    top = lim.max_batch_size
    if top is not None and recipe.build.max_batch_size > top:
        raise CompatError(
            f"{lim.label} engines allow max_batch_size <= {top} (build.max_batch_size={recipe.build.max_batch_size})",
            mode=recipe.mode,
            backend="engine",
            hint="lower build.max_batch_size",
        )


def instead_of_engine(mode: str) -> str:
    """What to use instead of the mode's engine path (its ModeInfo's `instead_of_engine`)."""
    known = BY_NAME.get(mode)
    return (known.instead_of_engine if known is not None else None) or "see `sdtk compat`"


def removal_fix(mode: str) -> str:
    """The fix-it where a release removed the engine path: what to use instead, and, for a mode that
    has no other GPU path, the last release that still has it."""
    instead = instead_of_engine(mode)
    return (
        instead if info(mode).llmapi.supported else f"{instead}; {keep_engine()}; or backend: reference (CPU)"
    )


@dataclass(frozen=True)
class Cell:
    mode: str
    backend: str
    supported: bool
    trtllm_name: str | None  # engine: --speculative_decoding_mode; llmapi: decoding_type
    min_version: str | None  # inclusive
    max_version: str | None  # exclusive
    deprecated_from: str | None  # inclusive: supported, with a deprecation warning
    families: tuple[str, ...] | None  # HF model_type values; None = any
    reason: str
    fix: str

    def version_range(self) -> str:
        if self.backend == "reference":
            return "not needed"
        lo = f">={self.min_version}" if self.min_version else ""
        hi = f"<{self.max_version}" if self.max_version else ""
        return ",".join(x for x in (lo, hi) if x) or "any"

    def at(self, line: str) -> str:
        """yes | deprecated | no, for one release line ("1.2") or version."""
        if not self.supported:
            return "no"
        if self.backend == "reference":
            return "yes"
        if problems(self, line, None):
            return "no"
        return "deprecated" if warnings(self, line) else "yes"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["versions"] = self.version_range()
        d["by_version"] = {line: self.at(line) for line in COLUMNS}
        return d


def _cell(m: ModeInfo, backend: str) -> Cell:
    """A mode × backend cell, from the mode's registry entry (toolkit.modes)."""
    sup = m.support(backend)
    if not sup.supported:
        return Cell(m.name, backend, False, None, None, None, None, None, sup.reason, sup.fix)
    if backend == "engine":
        name = m.engine_name if m.name != "none" else None
        return Cell(
            m.name,
            backend,
            True,
            name,
            None,
            ENGINE_MAX,
            ENGINE_DEPRECATED,
            sup.families,
            sup.reason,
            sup.fix,
        )
    if backend == "llmapi":
        name = m.llmapi_types[0] if m.llmapi_types else None
        return Cell(
            m.name,
            backend,
            True,
            name,
            sup.min_version or LLMAPI_MIN,
            None,
            None,
            sup.families,
            sup.reason,
            sup.fix,
        )
    return Cell(m.name, backend, True, None, None, None, None, None, sup.reason, sup.fix)


# Per backend, the supported modes first.
_CELLS: list[Cell] = [
    _cell(m, backend)
    for backend in ("engine", "llmapi", "reference")
    for supported in (True, False)
    for m in REGISTRY
    if m.support(backend).supported is supported
]
_INDEX = {(c.mode, c.backend): c for c in _CELLS}


def cell(mode: str, backend: str) -> Cell:
    return _INDEX[(mode, backend)]


def matrix(mode: str | None = None, backend: str | None = None) -> list[Cell]:
    return [
        c for c in _CELLS if (mode is None or c.mode == mode) and (backend is None or c.backend == backend)
    ]


def installed_trtllm_version() -> str | None:
    """The installed tensorrt_llm version, from package metadata (importing it costs seconds)."""
    return probe.installed_trtllm_version()


def problems(c: Cell, version: str | None, family: str | None) -> list[str]:
    """Why `c` does not apply to this version/family; empty when it does. Versions compare on the
    release tuple (1.2.0rc2 is a 1.2, 1.3.0rc24 a 1.3)."""
    out = []
    if not c.supported:
        return [c.reason]
    if version is not None and c.backend != "reference":
        if c.min_version and release.below(version, c.min_version):
            out.append(
                f"TensorRT-LLM {version} is older than {c.min_version}, the first with the {c.backend} path"
            )
        if c.max_version and release.at_least(version, c.max_version):
            gone = f": {ENGINE_REMOVAL}" if c.backend == "engine" else ""
            out.append(f"TensorRT-LLM {version} has no {c.backend} path{gone}")
    if family is not None and c.families is not None and family not in c.families:
        out.append(f"model family '{family}' is not supported ({c.fix or c.reason})")
    return out


def warnings(c: Cell, version: str | None) -> list[str]:
    """What is deprecated about running `c` on this TensorRT-LLM version (empty: nothing)."""
    if version is None or c.deprecated_from is None or not c.supported:
        return []
    if release.at_least(version, c.deprecated_from) and not (
        c.max_version and release.at_least(version, c.max_version)
    ):
        return [f"TensorRT-LLM {version}: {ENGINE_DEPRECATION}; {instead_of_engine(c.mode)}"]
    return []


def versions_note(c: Cell) -> str:
    """For `sdtk compat`'s why column: where a supported cell is deprecated or removed, the cited
    reason and the fix-it ("" for a cell with neither)."""
    if not c.supported or c.deprecated_from is None:
        return ""
    return (
        f" | {c.deprecated_from}: deprecated (NVIDIA/TensorRT-LLM PR #11723); {c.max_version}: removed "
        f"(PRs #15907, #15918): {removal_fix(c.mode)}"
    )


def removed(c: Cell, version: str | None) -> bool:
    """The version is past the cell's last release line (the engine path on 1.3)."""
    return bool(version and c.supported and c.max_version and release.at_least(version, c.max_version))


def check(mode: str, backend: str, version: str | None = None, family: str | None = None) -> Cell:
    """The cell for (mode, backend); raises CompatError naming the reason and the fix (on a release
    that removed the backend, what to use instead)."""
    c = cell(mode, backend)
    found = problems(c, version, family)
    if found:
        fix = removal_fix(mode) if removed(c, version) else c.fix
        raise CompatError(
            f"speculative.mode '{mode}' on backend '{backend}': " + "; ".join(found),
            mode=mode,
            backend=backend,
            hint=fix or "see `sdtk compat`",
        )
    return c


@dataclass(frozen=True)
class Resolution:
    """The support matrix applied to one recipe, once per build or deployment: the cell it runs
    in (its backend), the TensorRT-LLM version planned for and where that came from, why, and the
    warnings (deprecations; also at the end of `why`). Later stages read it instead of asking
    the matrix again."""

    cell: Cell
    version: str | None
    version_source: str  # "installed", "recipe", "none"
    why: str  # ends with the deprecation warnings, when there are any
    warnings: tuple[str, ...] = ()

    @property
    def backend(self) -> str:
        return self.cell.backend

    def check_family(self, family: str | None) -> None:
        """The target's model family (known once its checkpoint is resolved) against the same
        cell; CompatError naming the fix where the cell does not take it."""
        found = problems(self.cell, None, family)
        if found:
            raise CompatError(
                f"speculative.mode '{self.cell.mode}' on backend '{self.backend}': " + "; ".join(found),
                mode=self.cell.mode,
                backend=self.backend,
                hint=self.cell.fix or "see `sdtk compat`",
            )


def resolve_backend(
    mode: str,
    requested: str,
    *,
    recipe_version: str | None = None,
    installed_version: str | None = None,
    family: str | None = None,
) -> Resolution:
    """Pick the backend for `backend: auto`, or confirm an explicit one.

    The installed TensorRT-LLM wins over the recipe's `trtllm_version`; with neither,
    auto prefers the LLM-API path (the maintained one) when the mode exists there.
    """
    if installed_version:
        version, source = installed_version, "installed"
    elif recipe_version:
        version, source = recipe_version, "recipe"
    else:
        version, source = None, "none"
    vtext = {
        "installed": f"installed TensorRT-LLM {version}",
        "recipe": f"recipe trtllm_version {version}",
    }.get(source, "no TensorRT-LLM installed or declared")

    if requested != "auto":
        c = check(mode, requested, version, family)
        return _resolved(c, version, source, f"backend '{requested}' requested; {c.reason} ({vtext})")

    rejected = []
    for backend in ("llmapi", "engine"):
        c = cell(mode, backend)
        found = problems(c, version, family)
        if not found:
            return _resolved(c, version, source, f"auto → {backend}: {c.reason} ({vtext})")
        rejected.append(f"{backend}: {'; '.join(found)}")
    fix = removal_fix(mode) if removed(cell(mode, "engine"), version) else None
    raise CompatError(
        f"backend auto found no TensorRT-LLM backend for mode '{mode}' ({vtext}): " + " | ".join(rejected),
        mode=mode,
        backend="auto",
        hint=fix
        or "use backend: reference for CPU, or a TensorRT-LLM version that has this mode (see `sdtk compat`)",
    )


def _resolved(c: Cell, version: str | None, source: str, why: str) -> Resolution:
    warned = tuple(warnings(c, version))
    text = why + "".join(f"; WARNING: {w}" for w in warned)
    return Resolution(c, version, source, text, warned)


def check_recipe(
    recipe: Recipe, installed_version: str | None = None, family: str | None = None
) -> Resolution:
    """The backend a recipe runs on, with the support matrix applied (raises CompatError)."""
    res = resolve_backend(
        recipe.mode,
        recipe.backend,
        recipe_version=recipe.trtllm_version,
        installed_version=installed_version,
        family=family,
    )
    # Backend-specific rules that the matrix cells alone do not express.
    spec = recipe.speculative
    if getattr(spec, "adaptive_draft_len", False) and res.backend != "reference":
        raise CompatError(
            "speculative.adaptive_draft_len is sdtk's reference-runtime option; TensorRT-LLM has no per-request "
            "adaptive draft length",
            mode=recipe.mode,
            backend=res.backend,
            hint="use draft_len_schedule / max_concurrency (llmapi), or backend: reference",
        )
    if res.backend == "engine" and (
        getattr(spec, "draft_len_schedule", None) is not None
        or getattr(spec, "max_concurrency", None) is not None
    ):
        raise CompatError(
            "speculative.draft_len_schedule / max_concurrency are LLM-API (PyTorch backend) options; the engine "
            "path's C++ executor has no load-aware speculation",
            mode=recipe.mode,
            backend="engine",
            hint="use backend: llmapi (TensorRT-LLM >= 1.2) or reference, or drop those fields",
        )
    if res.backend == "engine":
        _engine_limits(recipe)
        if info(recipe.mode).two_model and recipe.serving.decoupled:
            raise CompatError(
                "the official tensorrt_llm_bls draft-target loop rejects streaming, so serving.decoupled must be "
                "false on the engine backend",
                mode=recipe.mode,
                backend="engine",
                hint="set serving.decoupled: false",
            )
    if res.backend == "llmapi":
        res = _engine_placement(recipe, res)
    return res


def _engine_placement(recipe: Recipe, res: Resolution) -> Resolution:
    """parallel.draft_tp / draft_device_ids / target_device_ids place the engine path's models (each
    tensorrt_llm model's gpu_device_ids); the LLM API runs the draft inside the target's LLM() with
    its tensor_parallel_size, so sdtk renders none of them there: say so rather than drop them."""
    p = recipe.parallel
    placed = [f"parallel.{f}" for f in ("draft_tp", "draft_device_ids", "target_device_ids") if getattr(p, f)]
    if not placed:
        return res
    w = (
        f"{', '.join(placed)}: engine-path placement, not rendered on llmapi (the LLM API runs the draft "
        f"inside the target's LLM() with tensor_parallel_size {p.tp}); drop it, or use backend: engine"
    )
    return replace(res, why=f"{res.why}; WARNING: {w}", warnings=(*res.warnings, w))
