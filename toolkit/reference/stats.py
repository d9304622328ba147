"""Speculative-decoding statistics of one generation call."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class SpecStats:
    """Counts over the target forward passes after prefill ("steps").

    Each step commits its accepted draft tokens plus one token of the target's own, so
    `tokens == accepted_tokens + steps` always holds (a step cut short by EOS or the
    token budget counts only what it committed). Position i is the i-th draft token of a
    step; for trees it is depth i+1, and every node at that depth counts as proposed.
    """

    steps: int = 0
    tokens: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    per_position_proposed: list[int] = field(default_factory=list)
    per_position_accepted: list[int] = field(default_factory=list)
    # Adaptive draft length (speculative.adaptive_draft_len): steps run at each draft length.
    draft_len_histogram: dict[int, int] = field(default_factory=dict)

    @property
    def acceptance_rate(self) -> float:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else 0.0

    @property
    def acceptance_length(self) -> float:
        return self.tokens / self.steps if self.steps else 0.0

    def record(self, proposed_per_depth: list[int], committed: int) -> None:
        """One step that proposed `proposed_per_depth[i]` tokens at depth i+1 and committed `committed` tokens."""
        accepted = committed - 1
        self.steps += 1
        self.tokens += committed
        self.draft_tokens += sum(proposed_per_depth)
        self.accepted_tokens += accepted
        _add(self.per_position_proposed, proposed_per_depth)
        if accepted > 0:
            acc = self.per_position_accepted
            if len(acc) < accepted:
                acc.extend([0] * (accepted - len(acc)))
            for i in range(accepted):
                acc[i] += 1

    def record_chain(self, proposed: int, committed: int, times: int = 1) -> None:
        """record([1] * proposed, committed): a step that proposed a chain of `proposed` tokens
        (`times` such steps)."""
        accepted = committed - 1
        self.steps += times
        self.tokens += committed * times
        self.draft_tokens += proposed * times
        self.accepted_tokens += accepted * times
        for counts, n in ((self.per_position_proposed, proposed), (self.per_position_accepted, accepted)):
            if len(counts) < n:
                counts.extend([0] * (n - len(counts)))
            for i in range(n):
                counts[i] += times

    def record_chains(self, steps: dict[tuple[int, int], int]) -> None:
        """record_chain(proposed, committed) `c` times for each ((proposed, committed), c) of
        `steps`: a loop's chain steps, counted as it ran and recorded once at its end."""
        for (proposed, committed), c in steps.items():
            self.record_chain(proposed, committed, c)

    def to_dict(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "tokens": self.tokens,
            "draft_tokens": self.draft_tokens,
            "accepted_tokens": self.accepted_tokens,
            "acceptance_rate": self.acceptance_rate,
            "acceptance_length": self.acceptance_length,
            "per_position_proposed": list(self.per_position_proposed),
            "per_position_accepted": list(self.per_position_accepted),
            "draft_len_histogram": dict(sorted(self.draft_len_histogram.items())),
        }


def _add(total: list[int], counts: list[int]) -> None:
    if len(total) < len(counts):
        total.extend([0] * (len(counts) - len(total)))
    for i, c in enumerate(counts):
        total[i] += c
