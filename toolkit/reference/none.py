"""Plain decoding: one target forward per token (the baseline every mode is measured against)."""

from __future__ import annotations

from typing import Any

from toolkit.reference.core import Context, Proposal, Verdict
from toolkit.reference.models import Forward


class PlainSpeculator:
    """Autoregressive decoding: an empty proposal every step."""

    needs_hidden = False
    needs_aux = False

    def prefill(self, ctx: Context, fwd: Forward | None) -> None:
        """Nothing to prepare."""

    def propose(self, ctx: Context, budget: int) -> Proposal:
        return Proposal()

    def update(self, ctx: Context, proposal: Proposal, fwd: Forward, verdict: Verdict) -> None:
        """Nothing to track."""


def speculator(spec: Any, runtime: Any, sampling: Any, draft: Any) -> PlainSpeculator:
    return PlainSpeculator()
