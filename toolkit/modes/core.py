"""What a mode is made of: its facts (`ModeInfo`), its recipe class and its hooks, and the
registration that checks a mode plug-in has all of them.

A mode plug-in is a module (toolkit/modes/<mode>.py) with
- `INFO`: its `ModeInfo` (names, sources, what each backend supports);
- `SPEC`: its recipe class, the `speculative:` variant whose `mode` Literal is `INFO.name`;
- one function per name in `HOOKS` (see `ModeHooks` for their signatures).

`register` refuses a plug-in that lacks any of them, naming what is missing, so a new mode
fails at import rather than at the first request that reaches the missing piece.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, cast, get_args

from pydantic import BaseModel

if TYPE_CHECKING:
    from toolkit.build.context import BuildContext
    from toolkit.checks import Check as CheckResult

# The mode names, for code that must name one (dispatch tables, head kinds, recipe discriminators);
# what a mode does is a ModeInfo attribute or a hook. A test checks no other module spells them out.
NONE: Final = "none"
DRAFT_TARGET: Final = "draft_target"
EAGLE3: Final = "eagle3"
EAGLE: Final = "eagle"
MEDUSA: Final = "medusa"
LOOKAHEAD: Final = "lookahead"
NGRAM: Final = "ngram"
# The recipe's discriminators (pydantic's tagged union needs Literal types).
NoneName = Literal["none"]
DraftTargetName = Literal["draft_target"]
Eagle3Name = Literal["eagle3"]
EagleName = Literal["eagle"]
MedusaName = Literal["medusa"]
LookaheadName = Literal["lookahead"]
NGramName = Literal["ngram"]
# The HF config model_type of Medusa head checkpoints (FasterDecoding/Medusa).
MEDUSA_HEAD_MODEL_TYPE: Final = "medusa"
# tensorrt_llm.models.modeling_utils.SpeculativeDecodingMode (IntFlag, auto() from 1), as
# trtllm-build writes it into build_config, → the --speculative_decoding_mode names.
ENGINE_MODE_FLAGS: dict[int, str] = {
    1: "none",
    2: "draft_tokens_external",
    4: "medusa",
    8: "lookahead_decoding",
    16: "explicit_draft_tokens",
    32: "eagle",
    64: "ngram",
}

# Where a recipe runs: engine (trtllm-build + Triton's tensorrtllm backend), llmapi (TRT-LLM's
# PyTorch backend), reference (sdtk's PyTorch implementation); auto picks one.
BACKENDS = ("auto", "engine", "llmapi", "reference")
# The engine path (trtllm-build, Triton's C++ tensorrtllm backend, the inflight_batcher_llm templates)
# per TensorRT-LLM release line, compared on the release tuple (toolkit.containers.release: 1.2.0rc2
# is a 1.2): shipped through 1.1.x; shipped but deprecated on 1.2.x (NVIDIA/TensorRT-LLM PR #11723,
# 2026-02-25: DeprecationWarning in trtllm-build, trtllm-refit, convert_checkpoint.py and
# LLM(backend="tensorrt"); NGC 26.03-26.07 carry 1.2.0/1.2.1 with it); removed in the 1.3 line
# (PR #15907, 2026-07-03: the C++ backend and every TRT-engine model-repository template; PR #15918:
# the legacy TRT Python modules, BuildConfig, TrtLlmArgs and the runtime).
ENGINE_DEPRECATED = "1.2"  # inclusive: the engine path warns from here on
ENGINE_MAX = "1.3"  # exclusive: the first release line without the engine path
LLMAPI_MIN = "1.0"
ENGINE_DEPRECATION = (
    "the engine path (trtllm-build, the tensorrtllm C++ backend) is deprecated since TensorRT-LLM 1.2 "
    "(NVIDIA/TensorRT-LLM PR #11723) and removed in the 1.3 line"
)
ENGINE_REMOVAL = (
    "the 1.3 line removed trtllm-build, the tensorrtllm C++ backend and every inflight_batcher_llm "
    "template (NVIDIA/TensorRT-LLM PR #15907) and the legacy TRT Python modules (PR #15918)"
)

ENGINE_ONLY_FIX = (
    "use backend: engine with TensorRT-LLM <= 1.2.x (NGC tritonserver:26.07-trtllm-python-py3 carries "
    "1.2.1, the engine path deprecated), or backend: reference on CPU"
)
_REFERENCE = "sdtk's PyTorch implementation; CPU or any torch device"

# The Triton models whose parameters a mode fills (`triton_parameters`' `model`).
LLM_MODEL = "tensorrt_llm"
BLS_MODEL = "tensorrt_llm_bls"


@dataclass(frozen=True)
class Support:
    """Whether a backend serves the mode, why (or why not), and the fix when it does not."""

    supported: bool
    reason: str
    fix: str = ""
    families: tuple[str, ...] | None = None  # HF model_type values it is limited to; None = any
    # The first TensorRT-LLM release whose backend has the mode, where later than the backend's
    # own first (LLMAPI_MIN); None: the backend's. toolkit.compat's cells read it.
    min_version: str | None = None


# What to use instead of a model-free mode's engine path (removed in the 1.3 line). SA: the
# suffix-automaton drafter, `decoding_type: SA` (and the `sa_config` enhancer) of the 1.3 line's
# llm_args.py.
NO_DRAFT_MODEL_FIX = (
    "mode: ngram (NGram) or SA (the 1.3 line's suffix-automaton drafter), which need no draft model"
)


@dataclass(frozen=True)
class EngineLimits:
    """What the mode's engines allow besides the rest (toolkit.compat refuses a recipe past them);
    `label` names the engines in the error."""

    label: str
    pipeline_parallel: bool = True
    max_batch_size: int | None = None


@dataclass(frozen=True)
class Training:
    """What `sdtk train-draft` makes for the mode: the `models` field its artifact replaces, and the
    artifact's directory under the output directory."""

    replaces: str
    directory: str


@dataclass(frozen=True)
class SelfTest:
    """How `sdtk selftest` deploys the mode on its tiny random-weight checkpoints (toolkit.selftest):
    the GPU paths it runs the mode on ("engine", "llmapi"), its `speculative:` section (less `mode`),
    and the section's key, if any, for the layers the self-test's EAGLE-3 head captures (set where
    the TensorRT-LLM version has it).

    `target` names the checkpoint the cell serves as its target (a role toolkit.selftest writes:
    "target", the tiny Llama, unless the mode needs another), `family` that checkpoint's HF
    `model_type` (the support matrix's family, which plans the cell), and `dtype` the GPU paths'
    dtype (None: the self-test's default, float16); the reference backend always runs float32."""

    paths: tuple[str, ...]
    section: tuple[tuple[str, Any], ...] = ()
    capture_key: str | None = None
    target: str = "target"
    family: str = "llama"
    dtype: str | None = None

    def spec(self, name: str, capture: list[int] | None) -> dict[str, Any]:
        """The recipe's `speculative:` section; `capture`: the head's layers (None: leave them out)."""
        out: dict[str, Any] = {"mode": name, **dict(self.section)}
        if self.capture_key is not None and capture is not None:
            out[self.capture_key] = capture
        return out


@dataclass(frozen=True)
class ModeInfo:
    name: str  # the recipe's speculative.mode
    source: str | None  # the models.<source> it needs besides the target (None: none)
    chain: bool  # proposes a linear chain whose length max_draft_len sets (bench tunes γ)
    engine_name: str | None  # trtllm-build --speculative_decoding_mode; sdtk's own where it has none
    llmapi_types: tuple[str, ...]  # speculative_config decoding_type: written first, accepted all
    draft_len_rule: str  # tokens proposed per step (the recipe class's `draft_len`)
    engine: Support
    llmapi: Support
    reference: Support = field(default_factory=lambda: Support(True, _REFERENCE))
    # The draft is a second model (its own engine, tensorrt_llm_draft) that the BLS loop drives.
    two_model: bool = False
    # tensorrt_llm's `decoding_mode` parameter ("" = the engine's own, for two-model verification).
    decoding_mode: str = "top_k_top_p"
    engine_decoding_mode: str | None = None  # where the C++ backend names it differently
    # The engine path compiles the drafting heads in: speculation cannot be switched off per deployment.
    heads_in_engine: bool = False
    # trtllm-build flags the mode needs besides --speculative_decoding_mode (upstream examples).
    engine_build_args: tuple[str, ...] = ()
    # The converter the target converts with when the heads convert into it (a key of the
    # container facts' `converters`); None: the target family's own converter.
    engine_converter: str | None = None
    # `sdtk train-draft`: the modelopt.torch.speculative mode that trains its drafting heads
    # (mtsp.convert(model, [(modelopt_mode, config)])); None where ModelOpt trains nothing for it.
    modelopt_mode: str | None = None
    # llmapi: the PyTorch backend's overlap scheduler cannot run this mode's drafter
    # (upstream examples set disable_overlap_scheduler: true for it).
    llmapi_disable_overlap: bool = False
    # llmapi: recipe fields whose speculative_config keys TensorRT-LLM 1.0 lacks (arrived in 1.1).
    llmapi_fields_since_1_1: tuple[str, ...] = ()
    # llmapi: speculative_config keys that carry a recipe field under another name in some release
    # (key, field): what the reference llmapi model reads back (toolkit.serving.llmapi).
    llmapi_aliases: tuple[tuple[str, str], ...] = ()
    # `sdtk train-draft`: what it trains for the mode; None: nothing.
    training: Training | None = None
    # `sdtk selftest`: how the GPU self-test deploys it; None: the self-test leaves it out.
    selftest: SelfTest | None = None
    # What to use instead of the engine path where a release removed it (toolkit.compat's fix-it).
    instead_of_engine: str | None = None
    engine_limits: EngineLimits | None = None

    def triton_decoding_mode(self, backend: str) -> str:
        if backend == "engine" and self.engine_decoding_mode is not None:
            return self.engine_decoding_mode
        return self.decoding_mode

    def support(self, backend: str) -> Support:
        if backend == "engine":
            return self.engine
        if backend == "llmapi":
            return self.llmapi
        if backend == "reference":
            return self.reference
        raise KeyError(backend)


def no_support(reason: str, fix: str) -> Support:
    return Support(False, reason, fix)


def batched(what: str) -> Support:
    """The reference backend, with what its served model's one forward per iteration covers
    (in-flight batching, toolkit/reference/batching.py)."""
    return Support(True, f"{_REFERENCE}; in-flight batched: {what}")


def triton_bool(value: bool) -> str:
    """A boolean Triton parameter value, spelled as upstream's fill commands spell it."""
    return "True" if value else "False"


@dataclass(frozen=True)
class Finding:
    """What a mode's `serving_checks` found about serving a recipe on built engines: an error
    (`fatal`; the repository is not written) or a warning. `on_engine`: about the target engine's
    build config (the error names its config.json)."""

    message: str
    hint: str = ""
    fatal: bool = True
    on_engine: bool = False


@dataclass(frozen=True)
class LlmapiCall:
    """What build/llmapi.py hands a mode's `llmapi_config`: the decoding_type to write (the first
    of `ModeInfo.llmapi_types`, or the version's EAGLE-3 spelling), the version's key for the
    speculative model, and that model's reference (None for a mode without a source)."""

    decoding_type: str
    model_key: str
    model: str | None
    version: str | None = None  # the declared TensorRT-LLM version (None: the newest line)


@dataclass(frozen=True)
class EngineArgs:
    """A mode's own arguments to the engine build of one role (toolkit/build/engine.py): for the
    converter, the checkpoints it reads (after --model_dir) and its options (after --workers); for
    trtllm-build, flags that depend on the recipe (the fixed ones are `ModeInfo.engine_build_args`)."""

    convert_sources: tuple[str, ...] = ()
    convert: tuple[str, ...] = ()
    build: tuple[str, ...] = ()


@dataclass(frozen=True)
class ProposerFacts:
    """How bench reads a recipe's drafts: the static tree (the recipe field and its paths), or the
    Jacobi window (W, N, G); None where the mode has none. `knob`: a `speculative` field besides the
    draft length that `tune` also sweeps, at the recipe's own draft length (its dotted path and the
    values to try, the recipe's own among them or not); None where the mode has none."""

    tree: tuple[str, list[list[int]]] | None = None
    window: tuple[int, int, int] | None = None
    knob: tuple[str, tuple[int, ...]] | None = None


class PreflightKit(Protocol):
    """The shared build checks a mode's `preflight` hook picks from (toolkit.build.preflight passes
    them in, so that a mode's home does not import the build stage)."""

    def draft_target(self, ctx: BuildContext) -> list[CheckResult]: ...

    def head_fit(self, ctx: BuildContext, role: str) -> CheckResult: ...

    def medusa_heads(self, ctx: BuildContext) -> CheckResult: ...

    def eagle3_vocab_map(self, ctx: BuildContext) -> CheckResult: ...

    def eagle3_layers(self, ctx: BuildContext) -> CheckResult: ...


class ModeHooks(Protocol):
    """The hooks every mode plug-in defines (module-level functions of these names)."""

    def triton_parameters(self, spec: Any, backend: str, model: str) -> dict[str, str]:
        """The mode's own parameters of Triton model `model` (LLM_MODEL or BLS_MODEL) on an engine
        or reference repository; render fills every other parameter with its default."""
        ...

    def serving_checks(self, spec: Any, backend: str, engine_draft_len: int | None) -> list[Finding]:
        """What stops (or warns about) serving `spec` on `backend` with the built target engine."""
        ...

    def engine_args(self, spec: Any, ctx: BuildContext, role: str) -> EngineArgs:
        """The mode's converter and trtllm-build arguments for `role` ("target" or "draft")."""
        ...

    def llmapi_config(self, spec: Any, call: LlmapiCall) -> dict[str, Any] | None:
        """The llmapi `speculative_config` (without the load-aware knobs), None for no speculation."""
        ...

    def preflight(self, ctx: BuildContext, checks: PreflightKit) -> list[CheckResult]:
        """The mode's own build preflight checks (its own, or picked from `checks`)."""
        ...

    def draft_forwards(self, draft_len: int) -> int:
        """Cost shape for plan: draft-side forward passes per step at draft length `draft_len`."""
        ...

    def proposer(self, spec: Any) -> ProposerFacts:
        """Proposer replay: the tree or window bench reads from the recipe's `speculative`."""
        ...


HOOKS: tuple[str, ...] = (
    "triton_parameters",
    "serving_checks",
    "engine_args",
    "llmapi_config",
    "preflight",
    "draft_forwards",
    "proposer",
)


@dataclass(frozen=True)
class Mode:
    """A registered mode: its facts, its recipe class and its hooks."""

    info: ModeInfo
    spec: type[BaseModel]
    hooks: ModeHooks

    @property
    def name(self) -> str:
        return self.info.name


def _params(fn: Any) -> list[str]:
    return list(inspect.signature(fn).parameters)


def register(plugin: object) -> Mode:
    """Check a mode plug-in (INFO, SPEC and every hook in HOOKS) and return its Mode.

    Raises TypeError naming what is missing or wrong: a plug-in without a hook, or with a hook whose
    parameters are not ModeHooks', fails here, at import."""
    where = getattr(plugin, "__name__", repr(plugin))
    info = getattr(plugin, "INFO", None)
    if not isinstance(info, ModeInfo):
        raise TypeError(f"mode plug-in {where}: INFO must be a toolkit.modes.ModeInfo, got {info!r}")
    missing = [h for h in HOOKS if not callable(getattr(plugin, h, None))]
    if missing:
        raise TypeError(
            f"mode plug-in {where} (mode {info.name!r}) lacks the hook(s) {', '.join(missing)}; "
            f"every mode defines {', '.join(HOOKS)} (toolkit.modes.ModeHooks)"
        )
    for hook in HOOKS:
        want = _params(getattr(ModeHooks, hook))[1:]  # less `self`
        got = _params(getattr(plugin, hook))
        if got != want:
            raise TypeError(
                f"mode plug-in {where} (mode {info.name!r}): hook {hook} takes ({', '.join(got)}), "
                f"not ({', '.join(want)}) as toolkit.modes.ModeHooks.{hook} does"
            )
    spec = getattr(plugin, "SPEC", None)
    if not (isinstance(spec, type) and issubclass(spec, BaseModel)):
        raise TypeError(f"mode plug-in {where} (mode {info.name!r}): SPEC must be its recipe class")
    field_ = spec.model_fields.get("mode")
    if field_ is None or get_args(field_.annotation) != (info.name,):
        raise TypeError(
            f"mode plug-in {where}: SPEC {spec.__name__}.mode must be Literal[{info.name!r}] "
            "(the recipe's discriminator)"
        )
    return Mode(info, spec, cast("ModeHooks", plugin))
