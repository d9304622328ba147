"""Mode `none`: plain autoregressive decoding, the baseline every speculative mode is held to."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from toolkit.modes.core import (
    NONE,
    EngineArgs,
    Finding,
    LlmapiCall,
    ModeInfo,
    NoneName,
    PreflightKit,
    ProposerFacts,
    SelfTest,
    Support,
    batched,
)
from toolkit.schema import Strict

if TYPE_CHECKING:
    from toolkit.build.context import BuildContext
    from toolkit.checks import Check as CheckResult

INFO = ModeInfo(
    NONE,
    source=None,
    instead_of_engine="use backend: llmapi (TensorRT-LLM's PyTorch backend serves the target alone)",
    selftest=SelfTest(paths=("engine", "llmapi")),
    chain=False,
    engine_name=None,
    llmapi_types=(),
    draft_len_rule="0: no speculation",
    engine=Support(True, "plain engine build"),
    llmapi=Support(True, "LLM API without speculative_config"),
    reference=batched("decode steps of all sequences"),
)


class NoSpeculation(Strict):
    """Plain autoregressive decoding: the baseline."""

    mode: NoneName = "none"

    @property
    def draft_len(self) -> int:
        return 0


SPEC = NoSpeculation


def triton_parameters(spec: NoSpeculation, backend: str, model: str) -> dict[str, str]:
    return {}


def serving_checks(spec: NoSpeculation, backend: str, engine_draft_len: int | None) -> list[Finding]:
    return []


def engine_args(spec: NoSpeculation, ctx: BuildContext, role: str) -> EngineArgs:
    return EngineArgs()


def llmapi_config(spec: NoSpeculation, call: LlmapiCall) -> dict[str, Any] | None:
    return None


def preflight(ctx: BuildContext, checks: PreflightKit) -> list[CheckResult]:
    return []


def draft_forwards(draft_len: int) -> int:
    return 0


def proposer(spec: NoSpeculation) -> ProposerFacts:
    return ProposerFacts()
