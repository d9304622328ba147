"""Acceptance per draft position for an A/B's speculative side, replayed in process.

Served perf metrics carry only totals (accepted and proposed draft tokens per request), not
where in the draft the rejections fall. For a reference-backend recipe with local models and
greedy decoding, the reference runtime reproduces the server's decoding exactly (same code,
same prompts, same token budget), so replaying the run's requests in process gives the
per-position acceptance of what was served; the server's own totals for the same requests are
kept next to the replay's as the yardstick (they must agree).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from toolkit.bench.metrics import per_position_acceptance
from toolkit.bench.workloads import Prompt

SOURCE = "in-process replay of the run's requests (reference runtime, greedy)"


@dataclass
class ReplayedAcceptance:
    source: str
    requests: int
    per_position: list[float]  # P(draft positions 1..k all accepted | position k proposed)
    accepted_draft_tokens: int
    draft_tokens: int
    server_accepted_draft_tokens: int | None  # the server's counters over the same requests
    server_draft_tokens: int | None

    @property
    def matches_server(self) -> bool | None:
        if self.server_accepted_draft_tokens is None or self.server_draft_tokens is None:
            return None
        return (self.accepted_draft_tokens, self.draft_tokens) == (
            self.server_accepted_draft_tokens,
            self.server_draft_tokens,
        )

    def to_dict(self) -> dict[str, Any]:
        return dict(asdict(self), matches_server=self.matches_server)


def replayable(recipe: Any, temperature: float | None) -> bool:
    """Greedy, reference backend, a speculative mode and local models this machine can load."""
    from toolkit.bench.plan import probe_possible

    if recipe is None or temperature not in (None, 0, 0.0) or recipe.mode == "none":
        return False
    if getattr(recipe, "backend", None) != "reference":
        return False
    return probe_possible(recipe)[0]


def replay_acceptance(
    recipe: Any, prompts: list[Prompt], server_records: list[Any] | None = None
) -> ReplayedAcceptance:
    """Run `prompts` (the run's request list, in order) through the recipe in process.

    `server_records`: the speculative side's records of one level (index = position in
    `prompts`), whose server-reported draft counts are summed for the same requests."""
    from toolkit.bench.plan import encode, load_runtime

    rt = load_runtime(recipe)
    proposed: list[int] = []
    accepted: list[int] = []
    acc_total = draft_total = 0
    for p in prompts:
        r = rt.generate(encode(rt, p.text), p.max_tokens, spec=recipe.speculative)
        _add(proposed, r.stats.per_position_proposed)
        _add(accepted, r.stats.per_position_accepted)
        acc_total += r.stats.accepted_tokens
        draft_total += r.stats.draft_tokens
    s_acc = s_draft = None
    if server_records:
        ok = [r for r in server_records if r.ok and r.index < len(prompts)]
        if len(ok) == len(prompts) and all(r.draft_tokens is not None for r in ok):
            s_acc = sum(r.accepted_draft_tokens or 0 for r in ok)
            s_draft = sum(r.draft_tokens or 0 for r in ok)
    return ReplayedAcceptance(
        SOURCE,
        len(prompts),
        per_position_acceptance(proposed, accepted),
        acc_total,
        draft_total,
        s_acc,
        s_draft,
    )


def _add(total: list[int], counts: list[int]) -> None:
    total.extend([0] * (len(counts) - len(total)))
    for i, c in enumerate(counts):
        total[i] += c
