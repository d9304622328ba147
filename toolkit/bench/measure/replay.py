"""Acceptance per draft position for an A/B's speculative side, replayed in process.

Served perf metrics carry only totals (accepted and proposed draft tokens per request), not
where in the draft the rejections fall. For a reference-backend recipe with local models and
greedy decoding, the reference runtime reproduces the server's decoding exactly (same code,
same prompts, same token budget), so replaying the run's requests in process gives the
per-position acceptance of what was served; the server's own totals for the same requests are
kept next to the replay's as the yardstick (they must agree).

Draft-target is served by the BLS loop, not by the runtime's own draft-target speculator: each
iteration drafts γ tokens with the draft model, and the target verifies them and then, as in
TensorRT-LLM's `draft_tokens_external`, decodes plainly up to γ + 1 tokens. Its replay runs that
loop (`_bls_draft_target`), so it proposes what the served deployment proposed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from toolkit.bench.measure.inprocess import encode, load_runtime, probe_possible
from toolkit.bench.measure.metrics import per_position_acceptance
from toolkit.bench.measure.workloads import Prompt
from toolkit.bench.proposers import has_draft_model

if TYPE_CHECKING:
    from toolkit.recipe import Recipe

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


def replayable(recipe: Recipe | None, temperature: float | None) -> bool:
    """Greedy, reference backend, a speculative mode and local models this machine can load."""
    if recipe is None or temperature not in (None, 0, 0.0) or recipe.mode == "none":
        return False
    if getattr(recipe, "backend", None) != "reference":
        return False
    return probe_possible(recipe)[0]


def replay_acceptance(
    recipe: Recipe, prompts: list[Prompt], server_records: list[Any] | None = None
) -> ReplayedAcceptance:
    """Run `prompts` (the run's request list, in order) through the recipe in process.

    `server_records`: the speculative side's records of one level (index = position in
    `prompts`), whose server-reported draft counts are summed for the same requests."""

    rt = load_runtime(recipe)
    spec: Any = recipe.speculative  # any mode's: max_draft_len is read for draft-target only
    proposed: list[int] = []
    accepted: list[int] = []
    acc_total = draft_total = 0
    for p in prompts:
        if has_draft_model(recipe.mode):
            per_proposed, per_accepted = _bls_draft_target(
                rt, encode(rt, p.text), p.max_tokens, spec.max_draft_len
            )
        else:
            stats = rt.generate(encode(rt, p.text), p.max_tokens, spec=recipe.speculative).stats
            per_proposed, per_accepted = stats.per_position_proposed, stats.per_position_accepted
        _add(proposed, per_proposed)
        _add(accepted, per_accepted)
        acc_total += sum(per_accepted)
        draft_total += sum(per_proposed)
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


def _bls_draft_target(
    rt: Any, prompt: list[int], max_new: int, draft_len: int
) -> tuple[list[int], list[int]]:
    """Per-position (proposed, accepted) of one request through the BLS draft-target loop
    (model_repo_templates/inflight_batcher_llm/tensorrt_llm_bls, `_speculate`), greedy, with the
    target and draft models of `rt` and the tokenizer's end id (left out of every output)."""
    from toolkit.reference import ReferenceRuntime
    from toolkit.reference.runtime import parse_speculative

    draft_rt = ReferenceRuntime(target=rt.draft, tokenizer=rt.tokenizer, spec=parse_speculative(None))
    eos = rt.eos_token_id
    end = eos if eos is not None else -1
    proposed, accepted = [0] * draft_len, [0] * draft_len
    tokens, generated = list(prompt), 0
    while generated < max_new:
        k = min(draft_len, max_new - generated - 1)
        draft: list[int] = []
        for _ in range(k):  # the draft model: request_output_len k, stops at the end id
            step = draft_rt.verify_draft(tokens + draft, [], end_id=end).new_tokens
            if not step or step[0] == eos:
                break
            draft.append(step[0])
        verified = rt.verify_draft(tokens, draft, end_id=end)
        new = list(verified.new_tokens)
        for i in range(len(draft)):
            proposed[i] += 1
            accepted[i] += i < min(verified.accepted, len(draft))
        while len(new) < len(draft) + 1 and eos not in new:  # then plainly, to len(draft) + 1
            new += rt.verify_draft(tokens + new, [], end_id=end).new_tokens
        finished = eos in new
        if finished:
            new = new[: new.index(eos)]
        new = new[: max_new - generated]
        tokens += new
        generated += len(new)
        if finished or not new:
            break
    return proposed, accepted


def _add(total: list[int], counts: list[int]) -> None:
    total.extend([0] * (len(counts) - len(total)))
    for i, c in enumerate(counts):
        total[i] += c
