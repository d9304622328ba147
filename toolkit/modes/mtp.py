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

INFO = ModeInfo(
    MTP,
    training=Training("target", MTP),  # the trained artifact: a target that carries its MTP layers
    source=None,  # the MTP layers are part of the target checkpoint
    # The served reference model speculates with the mode its engine directory was built for.
    decoding_mode="",
    chain=True,
    engine_name=None,
    llmapi_types=("MTP",),
    draft_len_rule="max_draft_len (MTP module steps; num_nextn_predict_layers up to 1.2)",
    engine=no_support(
        "MTP is a PyTorch-backend feature (MTPDecodingConfig supports pytorch and _autodeploy only)",
        "use backend: llmapi, or backend: reference on CPU",
    ),
    llmapi=Support(True, "speculative_config decoding_type MTP (the checkpoint's MTP layers)"),
    reference=batched("chain verification; the MTP module runs per sequence"),
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


def mtp_layers(ctx: BuildContext) -> tuple[int | None, str]:
    """The MTP layers the target's config.json declares (None: unreadable here) and where from."""
    r = ctx.sources["target"]
    if r.path is None or not (r.path / "config.json").is_file():
        return None, f"{r.ref} (config.json not available locally)"
    try:
        cfg = json.loads((r.path / "config.json").read_text())
    except (OSError, ValueError) as e:
        return None, f"{r.path}/config.json unreadable: {e}"
    value = cfg.get(COUNT_KEY) or 0
    return (int(value) if isinstance(value, int) else 0), f"{r.path}/config.json"


def preflight(ctx: BuildContext, checks: PreflightKit) -> list[CheckResult]:
    from toolkit.checks import FAILED, PASSED, SKIPPED
    from toolkit.checks import Check as Result

    n, where = mtp_layers(ctx)
    if n is None:
        return [Result("mtp-layers", SKIPPED, f"skipped: cannot read {COUNT_KEY} of {where}")]
    if n < 1:
        return [
            Result(
                "mtp-layers",
                FAILED,
                f"the target has no MTP layers ({where}: {COUNT_KEY} missing or 0); decoding_type MTP "
                "drafts with the checkpoint's own multi-token-prediction layers",
                "use a checkpoint that ships MTP layers (DeepSeek-V3/R1, GLM-4.5, Qwen3-Next, MiMo), "
                "or train them with `sdtk train-draft` on an mtp recipe",
            )
        ]
    return [Result("mtp-layers", PASSED, f"{n} MTP layer(s) ({where})")]


def draft_forwards(draft_len: int) -> int:
    return draft_len  # one MTP module step per draft token


def proposer(spec: Mtp) -> ProposerFacts:
    return ProposerFacts()
