"""The support matrix: speculative mode × backend × TensorRT-LLM version × model family.

Facts come from `shared/reference/trtllm-speculative.md` (§0, §1, §2.1, §4):
- the engine path (`trtllm-build`, Triton `tensorrtllm` C++ backend) exists up to TRT-LLM 1.1.x
  (1.2 removal unverified) and is the only home of Medusa, Lookahead and EAGLE-1/2;
- the PyTorch/LLM-API path starts at 1.0 and is the only home of EAGLE-3 and NGram;
- draft-target exists on both;
- the reference backend (sdtk's PyTorch implementation) runs everything, without TRT-LLM.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from importlib import metadata
from typing import TYPE_CHECKING

from packaging.version import Version

from toolkit.errors import CompatError
from toolkit.modes import EAGLE, ENGINE_MAX, LLMAPI_MIN, REGISTRY, ModeInfo, info

if TYPE_CHECKING:
    from toolkit.recipe import Recipe

GPU_BACKENDS = ("engine", "llmapi")


@dataclass(frozen=True)
class Cell:
    mode: str
    backend: str
    supported: bool
    trtllm_name: str | None  # engine: --speculative_decoding_mode; llmapi: decoding_type
    min_version: str | None  # inclusive
    max_version: str | None  # exclusive
    families: tuple[str, ...] | None  # HF model_type values; None = any
    reason: str
    fix: str

    def version_range(self) -> str:
        if self.backend == "reference":
            return "not needed"
        lo = f">={self.min_version}" if self.min_version else ""
        hi = f"<{self.max_version}" if self.max_version else ""
        return ",".join(x for x in (lo, hi) if x) or "any"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["versions"] = self.version_range()
        return d


def _cell(m: ModeInfo, backend: str) -> Cell:
    """A mode × backend cell, from the mode's registry entry (toolkit.modes)."""
    sup = m.support(backend)
    if not sup.supported:
        return Cell(m.name, backend, False, None, None, None, None, sup.reason, sup.fix)
    if backend == "engine":
        name = m.engine_name if m.name != "none" else None
        return Cell(m.name, backend, True, name, None, ENGINE_MAX, sup.families, sup.reason, sup.fix)
    if backend == "llmapi":
        name = m.llmapi_types[0] if m.llmapi_types else None
        return Cell(m.name, backend, True, name, LLMAPI_MIN, None, sup.families, sup.reason, sup.fix)
    return Cell(m.name, backend, True, None, None, None, None, sup.reason, sup.fix)


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
    for dist in ("tensorrt_llm", "tensorrt-llm"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def problems(c: Cell, version: str | None, family: str | None) -> list[str]:
    """Why `c` does not apply to this version/family; empty when it does."""
    out = []
    if not c.supported:
        return [c.reason]
    if version is not None and c.backend != "reference":
        v = Version(version)
        if c.min_version and v < Version(c.min_version):
            out.append(
                f"TensorRT-LLM {version} is older than {c.min_version}, the first with the {c.backend} path"
            )
        if c.max_version and v >= Version(c.max_version):
            out.append(
                f"TensorRT-LLM {version} no longer has the {c.backend} path (trtllm-build; verified only up to "
                f"1.1.x)"
            )
    if family is not None and c.families is not None and family not in c.families:
        out.append(f"model family '{family}' is not supported ({c.fix or c.reason})")
    return out


def check(mode: str, backend: str, version: str | None = None, family: str | None = None) -> Cell:
    """The cell for (mode, backend); raises CompatError naming the reason and the fix."""
    c = cell(mode, backend)
    found = problems(c, version, family)
    if found:
        raise CompatError(
            f"speculative.mode '{mode}' on backend '{backend}': " + "; ".join(found),
            mode=mode,
            backend=backend,
            hint=c.fix or "see `sdtk compat`",
        )
    return c


@dataclass(frozen=True)
class Resolution:
    backend: str
    version: str | None
    version_source: str  # "installed", "recipe", "none"
    why: str


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
        return Resolution(
            requested, version, source, f"backend '{requested}' requested; {c.reason} ({vtext})"
        )

    rejected = []
    for backend in ("llmapi", "engine"):
        c = cell(mode, backend)
        found = problems(c, version, family)
        if not found:
            return Resolution(backend, version, source, f"auto → {backend}: {c.reason} ({vtext})")
        rejected.append(f"{backend}: {'; '.join(found)}")
    raise CompatError(
        f"backend auto found no TensorRT-LLM backend for mode '{mode}' ({vtext}): " + " | ".join(rejected),
        mode=mode,
        backend="auto",
        hint="use backend: reference for CPU, or a TensorRT-LLM version that has this mode (see `sdtk compat`)",
    )


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
        if recipe.mode == EAGLE and recipe.parallel.pp != 1:
            raise CompatError(
                f"EAGLE engines do not support pipeline parallelism (parallel.pp={recipe.parallel.pp})",
                mode=EAGLE,
                backend="engine",
                hint="set parallel.pp: 1 and use tp instead",
            )
        if recipe.mode == EAGLE and recipe.build.max_batch_size > 512:
            raise CompatError(
                f"EAGLE engines allow max_batch_size <= 512 (build.max_batch_size={recipe.build.max_batch_size})",
                mode=EAGLE,
                backend="engine",
                hint="lower build.max_batch_size",
            )
        if info(recipe.mode).two_model and recipe.serving.decoupled:
            raise CompatError(
                "the official tensorrt_llm_bls draft-target loop rejects streaming, so serving.decoupled must be "
                "false on the engine backend",
                mode=recipe.mode,
                backend="engine",
                hint="set serving.decoupled: false",
            )
    return res
