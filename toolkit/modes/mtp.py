"""Mode `mtp`: the target's own multi-token-prediction layers (DeepSeek-V3 shape) draft k tokens, one
module step each, and the target verifies them as a chain (TensorRT-LLM `MTPDecodingConfig`,
decoding_type MTP, PyTorch backend, since before 1.0). The checkpoint must carry MTP layers: the
target's config.json `num_nextn_predict_layers` >= 1.

Per version (TensorRT-LLM 1.0.0 docs, examples/llm_speculative_decoding; llm_args.py @0004396): up to 1.2 the draft length is
`num_nextn_predict_layers` (1.0.0 docs example); from 1.3 it is `max_draft_len`, and a
`num_nextn_predict_layers` key is remapped to it with a deprecation warning (llm_args.py @0004396).
Relaxed acceptance for thinking (lossy) is not offered. docs/methods.md, "MTP"."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Literal

from packaging.version import InvalidVersion, Version
from pydantic import Field

from toolkit.modes.core import (
    EngineArgs,
    Finding,
    LlmapiCall,
    ModeInfo,
    PreflightKit,
    ProposerFacts,
    SelfTest,
    Support,
    Training,
    batched,
    no_support,
)
from toolkit.modes.load_aware import LoadAware

if TYPE_CHECKING:
    from toolkit.build.context import BuildContext
    from toolkit.checks import Check as CheckResult

MTP = "mtp"
COUNT_KEY = "num_nextn_predict_layers"
# Qwen3.5 declares its MTP layers under this key instead (ml-explore/mlx-lm#990: `mtp_num_hidden_layers: 1`).
COUNT_KEYS = (COUNT_KEY, "mtp_num_hidden_layers")

# The target architectures TensorRT-LLM's MTP runs: MTPForCausalLM
# (tensorrt_llm/_torch/models/modeling_speculative.py) picks the MTP layer by the target's
# `model_type` and raises "Model type {model_type} not supported for MTP" for any other, so a
# Llama or Qwen2/Qwen3 checkpoint with MTP weights still fails in TensorRT-LLM.
# Per family, what is known of the releases (docs/methods.md, "MTP: which targets TensorRT-LLM runs"):
# - verified: the first release line that has it (release notes, the 1.0.0 docs example);
# - main: in NVIDIA/TensorRT-LLM main @00679c6 (a 2026 snapshot that has DeepSeek-V4), but which
#   release first has it could not be read at a tag: accepted with a warning;
# - since: a line before which upstream did not have it (refused there).
UPSTREAM_MAIN = (
    "NVIDIA/TensorRT-LLM tensorrt_llm/_torch/models/modeling_speculative.py @00679c6 (MTPForCausalLM)"
)
VERIFIED: dict[str, tuple[str, str]] = {
    # DeepseekV3MTP is the only MTP layer of the 2025 file (@b35ac1b); the 1.0.0 docs example runs
    # MTPDecodingConfig on nvidia/DeepSeek-R1-FP4.
    "deepseek_v3": ("1.0", "DeepSeek-V3/R1 (the 1.0.0 docs example; DeepseekV3MTP in every version read)"),
    # 1.2.0 release notes (NVIDIA/TensorRT-LLM PR #11955): "Enabled MTP>1 support for DeepSeek v3.2".
    "deepseek_v32": ("1.2", "DeepSeek-V3.2 (1.2.0 release notes, PR #11955)"),
}
MAIN_ONLY: tuple[str, ...] = (
    "glm4_moe",  # GLM-4.5/4.6/4.7 (Glm4MTP; PR #8256, 2025-10)
    "glm_moe_dsa",  # GLM-5
    "exaone_moe",  # K-EXAONE
    "nemotron_h",  # Nemotron-H / Nemotron 3 (NemotronHMTP; PRs #11406, #11601, 2026-02)
    "nemotron_h_puzzle",
    "qwen3_next",  # Qwen3-Next, Qwen3.5 (Qwen3NextMTP; PR #12646, 2026-04)
    "qwen3_5_text",
    "qwen3_5_moe_text",
    "qwen4_exp_text",
    "step3p5",
    "step3p7",
    "deepseek_v4",
)
# Known absent before a release line: Qwen3-Next's MTP arrived with PR #12646 (opened 2026-04-01,
# after 1.2.0 of 2026-03-12); in 2025-12 the docs said Qwen3-Next had no MTP (NVIDIA/TensorRT-LLM issue #9901).
SINCE: dict[str, tuple[str, str]] = {
    family: ("1.3", "added by NVIDIA/TensorRT-LLM PR #12646 (2026-04), after the 1.2 release")
    for family in ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text")
}
FAMILIES: tuple[str, ...] = (*VERIFIED, *MAIN_ONLY)

INFO = ModeInfo(
    MTP,
    training=Training("target", MTP),  # the trained artifact: a target that carries its MTP layers
    source=None,  # the MTP layers are part of the target checkpoint
    # The served reference model speculates with the mode its engine directory was built for.
    decoding_mode="",
    chain=True,
    engine_name=None,
    llmapi_types=("MTP",),
    llmapi_aliases=((COUNT_KEY, "max_draft_len"),),  # up to 1.2 the draft length's key (llmapi_config)
    draft_len_rule="max_draft_len (MTP module steps; num_nextn_predict_layers up to 1.2)",
    engine=no_support(
        "MTP is a PyTorch-backend feature (MTPDecodingConfig supports pytorch and _autodeploy only)",
        "use backend: llmapi, or backend: reference on CPU",
    ),
    llmapi=Support(
        True,
        "speculative_config decoding_type MTP (the checkpoint's MTP layers; DeepSeek-V3-family targets, "
        "more per release: `sdtk build` checks the target's model_type)",
        families=FAMILIES,
    ),
    reference=batched("chain verification; the MTP module runs per sequence"),
    # The self-test's DeepSeek-V3 target with one MTP layer (toolkit/selftest/checkpoints.py
    # _mtp_target), the layer reused for 2 draft tokens; bfloat16 on the GPU, DeepSeek-V3's own dtype.
    selftest=SelfTest(
        paths=("llmapi",),
        section=(("max_draft_len", 2),),
        target="mtp_target",
        family="deepseek_v3",
        dtype="bfloat16",
    ),
)


class Mtp(LoadAware):
    """The target's MTP layers draft k tokens (one module reused per step: TensorRT-LLM's MTP-Eagle)."""

    mode: Literal["mtp"]
    max_draft_len: int = Field(1, ge=1, le=16, description="Draft tokens per step (MTP module steps).")

    @property
    def draft_len(self) -> int:
        return self.max_draft_len


SPEC = Mtp


def _before_1_3(version: str | None) -> bool:
    if version is None:
        return False
    try:
        return Version(version).release < (1, 3)
    except InvalidVersion:
        return False


def triton_parameters(spec: Mtp, backend: str, model: str) -> dict[str, str]:
    return {}


def serving_checks(spec: Mtp, backend: str, engine_draft_len: int | None) -> list[Finding]:
    return []


def engine_args(spec: Mtp, ctx: BuildContext, role: str) -> EngineArgs:
    return EngineArgs()


def llmapi_config(spec: Mtp, call: LlmapiCall) -> dict[str, Any] | None:
    # Up to 1.2 num_nextn_predict_layers is the draft length (MTP-Eagle reuses the one layer); 1.3
    # remaps it to max_draft_len with a deprecation warning, so it is written there instead.
    key = COUNT_KEY if _before_1_3(call.version) else "max_draft_len"
    return {"decoding_type": call.decoding_type, key: spec.max_draft_len}


def _config(ctx: BuildContext) -> tuple[dict[str, Any] | None, str]:
    """The target's config.json (None: not readable here) and where from."""
    r = ctx.sources["target"]
    if r.path is None or not (r.path / "config.json").is_file():
        return None, f"{r.ref} (config.json not available locally)"
    try:
        cfg = json.loads((r.path / "config.json").read_text())
    except (OSError, ValueError) as e:
        return None, f"{r.path}/config.json unreadable: {e}"
    return (cfg if isinstance(cfg, dict) else {}), f"{r.path}/config.json"


def _levels(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """The config and, for a composite model (Qwen3.5), its text_config."""
    text = cfg.get("text_config")
    return [cfg, *([text] if isinstance(text, dict) else [])]


def mtp_layers(ctx: BuildContext) -> tuple[int | None, str]:
    """The MTP layers the target's config.json declares (None: unreadable here) and where from."""
    cfg, where = _config(ctx)
    if cfg is None:
        return None, where
    for level in _levels(cfg):
        for key in COUNT_KEYS:
            value = level.get(key)
            if isinstance(value, int) and value > 0:
                return value, where
    return 0, where


def _from(version: str | None, since: str) -> bool:
    from toolkit.containers import release

    return version is None or release.at_least(version, since)


def supported_families(version: str | None) -> list[str]:
    """The model_type values TensorRT-LLM `version` may run MTP for (None: the newest line): every
    family upstream has, less those known to have arrived later (SINCE)."""
    return [f for f in FAMILIES if f not in SINCE or _from(version, SINCE[f][0])]


def verified_families(version: str | None) -> list[str]:
    """The model_type values whose MTP is verified for TensorRT-LLM `version`."""
    return [f for f, (since, _) in VERIFIED.items() if _from(version, since)]


def family_check(cfg: dict[str, Any], where: str, version: str | None) -> CheckResult:
    """Whether TensorRT-LLM `version` runs MTP on this target's architecture: passed (verified),
    warning (in upstream main, the release unverified) or failed (no MTP layer for it upstream)."""
    from toolkit.checks import FAILED, PASSED, WARNING
    from toolkit.checks import Check as Result

    types = [t for t in (level.get("model_type") for level in _levels(cfg)) if isinstance(t, str)]
    on = f"TensorRT-LLM {version}" if version else "the newest TensorRT-LLM line"
    known = supported_families(version)
    found = next((t for t in types if t in known), None)
    verified = [f"{f}: {VERIFIED[f][1]}" for f in verified_families(version)]
    if found is None:
        late = [f"{t} ({SINCE[t][1]})" for t in types if t in SINCE]
        return Result(
            "mtp-family",
            FAILED,
            f"{on} has no MTP layer for the target's architecture (model_type {', '.join(types) or 'missing'}, "
            f"{where}){': ' + '; '.join(late) if late else ''}. TensorRT-LLM's MTPForCausalLM picks the MTP "
            f"layer by model_type and raises 'Model type ... not supported for MTP' for any other "
            f"({UPSTREAM_MAIN}). Supported there: {', '.join(known)}; verified at a release: "
            + "; ".join(verified),
            "use a target of a supported family (deepseek-ai/DeepSeek-V3 or R1 is verified on every release), "
            "another mode (eagle3, draft_target, ngram), or backend: reference, which runs MTP on any "
            "architecture",
        )
    if found in verified_families(version):
        return Result("mtp-family", PASSED, f"{on} runs MTP for model_type {found} ({VERIFIED[found][1]})")
    return Result(
        "mtp-family",
        WARNING,
        f"model_type {found}: TensorRT-LLM has its MTP layer ({UPSTREAM_MAIN}), but whether {on} already "
        "has it is unverified (no release tag of that file could be read)",
        "check the container's tensorrt_llm/_torch/models/modeling_speculative.py, or use a DeepSeek-V3/R1 target",
    )


def preflight(ctx: BuildContext, checks: PreflightKit) -> list[CheckResult]:
    from toolkit.checks import FAILED, PASSED, SKIPPED
    from toolkit.checks import Check as Result

    cfg, where = _config(ctx)
    n, _ = mtp_layers(ctx)
    if cfg is None or n is None:
        what = (
            f"{COUNT_KEY} or model_type (the MTP families TensorRT-LLM has)"
            if ctx.backend == "llmapi"
            else COUNT_KEY
        )
        return [Result("mtp-layers", SKIPPED, f"skipped: cannot read {what} of {where}")]
    # Only TensorRT-LLM limits the architecture; the reference runtime builds the MTP block from any.
    family = [family_check(cfg, where, ctx.version)] if ctx.backend == "llmapi" else []
    if n < 1:
        return [
            Result(
                "mtp-layers",
                FAILED,
                f"the target has no MTP layers ({where}: {COUNT_KEY} missing or 0); decoding_type MTP "
                "drafts with the checkpoint's own multi-token-prediction layers",
                "use a checkpoint that ships MTP layers (DeepSeek-V3/R1, GLM-4.5, Qwen3-Next; MiMo on the "
                "reference backend), or train them with `sdtk train-draft` on an mtp recipe",
            ),
            *family,
        ]
    return [Result("mtp-layers", PASSED, f"{n} MTP layer(s) ({where})"), *family]


def draft_forwards(draft_len: int) -> int:
    return draft_len  # one MTP module step per draft token


def proposer(spec: Mtp) -> ProposerFacts:
    return ProposerFacts()
