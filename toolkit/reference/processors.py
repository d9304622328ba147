"""Per-request logits processing (penalties, min_tokens, bad words) and what a request asks back
(log probs, generation logits), with TensorRT-LLM's semantics.

TensorRT-LLM applies, per position (cpp/tensorrt_llm/kernels/penaltyKernels.cu,
`batchApplyPenalty`, NVIDIA/TensorRT-LLM commit 249d93d): the logit times 1/temperature; then,
for every token that occurs in the sequence so far (prompt and generated tokens alike, counted
with multiplicity), repetition (a logit < 0 times the penalty, else divided by it), presence
(minus the penalty) and frequency (minus the penalty times the count); then the end id is masked
while fewer than `min_tokens` tokens were generated. Bad words (`bad_words_list`) ban a word's
last token wherever the sequence ends with the word's other tokens, as transformers'
`NoBadWordsLogitsProcessor` does.

Speculation stays lossless because every verification row gets the processing of its own prefix:
row 0 (the root) sees the committed sequence, the row of a tree node sees the sequence plus the
node's ancestors and itself. Greedy decoding (temperature 0) applies the penalties to the raw
logits (TensorRT-LLM's kernel would scale by 1/(0 + 1e-6) first, which erases the additive
penalties at temperature 0; its greedy requests are top_k 1 at temperature 1, which this equals).

Processing is done in "raw" units so that `sampling.probs` (which divides by the temperature)
stays the one place temperature, top-k and top-p happen: presence and frequency are multiplied
by the temperature here, so that after the division they are subtracted from logit/T exactly
as TensorRT-LLM does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from toolkit.errors import GenerationError
from toolkit.reference.sampling import SamplingParams, probs


@dataclass(frozen=True)
class Processors:
    """A request's logits processors; the defaults change nothing."""

    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    min_tokens: int = 0
    end_id: int | None = None  # the token min_tokens holds back
    bad_words: tuple[tuple[int, ...], ...] = ()
    # The request's input length: min_tokens counts the tokens after it (None: the prompt's).
    prompt_len: int | None = None

    def __post_init__(self) -> None:
        if not self.repetition_penalty > 0:
            raise GenerationError(
                f"repetition_penalty {self.repetition_penalty} must be positive", hint="use 1.0 for none"
            )
        if self.min_tokens < 0:
            raise GenerationError(f"min_tokens {self.min_tokens} is negative", hint="use 0 for none")

    @property
    def penalises(self) -> bool:
        return self.repetition_penalty != 1.0 or self.presence_penalty != 0.0 or self.frequency_penalty != 0.0

    @property
    def active(self) -> bool:
        return self.penalises or self.min_tokens > 0 or any(self.bad_words)

    def row(
        self, logits: torch.Tensor, prefix: Sequence[int], prompt_len: int, sp: SamplingParams
    ) -> torch.Tensor:
        """One position's processed logits (1-D), its sequence so far being `prefix`."""
        return self.rows(logits.unsqueeze(0), [list(prefix)], prompt_len, sp)[0]

    def rows(
        self, logits: torch.Tensor, prefixes: list[list[int]], prompt_len: int, sp: SamplingParams
    ) -> torch.Tensor:
        """Processed copies of `logits` rows [R, V], row r's sequence so far being `prefixes[r]`."""
        x = logits.float().clone()
        vocab = x.shape[-1]
        scale = 1.0 if sp.greedy else sp.temperature
        for r, prefix in enumerate(prefixes):
            if self.penalises and prefix:
                counts = torch.bincount(torch.tensor(prefix, dtype=torch.long), minlength=vocab)[:vocab]
                seen = counts > 0
                row = x[r]
                if self.repetition_penalty != 1.0:
                    pen = torch.where(row < 0, row * self.repetition_penalty, row / self.repetition_penalty)
                    row = torch.where(seen, pen, row)
                sub = (self.presence_penalty * seen.float() + self.frequency_penalty * counts.float()) * scale
                x[r] = row - sub
            holding = self.min_tokens and len(prefix) - prompt_len < self.min_tokens
            if holding and self.end_id is not None and 0 <= self.end_id < vocab:
                x[r, self.end_id] = float("-inf")
            for word in self.bad_words:
                if word and 0 <= word[-1] < vocab and _ends_with(prefix, word[:-1]):
                    x[r, word[-1]] = float("-inf")
        return x


def _ends_with(seq: Sequence[int], tail: Sequence[int]) -> bool:
    return not tail or (len(seq) >= len(tail) and list(seq[len(seq) - len(tail) :]) == list(tail))


def tree_prefixes(
    tokens: Sequence[int], parents: Sequence[int], count: int, base: list[int]
) -> list[list[int]]:
    """The sequence so far of verification rows 0..count: row 0 is `base`, row i+1 is `base` plus
    node i's ancestors and node i (`parents[i]` < i, -1 for a child of the root)."""
    out = [base]
    for i in range(count):
        out.append(out[parents[i] + 1] + [tokens[i]])
    return out


@dataclass
class Trace:
    """What a request asks back per generated token, filled in commit order (entries past an end
    id or the length limit may follow; callers align by index).

    `log_probs`: TensorRT-LLM's `output_log_probs`, the log probability of each token under the
    distribution it was drawn from (penalties, temperature, and with `normalize` top-k/top-p
    renormalised: greedy tokens then get 0, as upstream with normalize_log_probs true,
    tensorrtllm_backend issue #276); without `normalize`, log_softmax of the processed logits
    over the whole vocabulary. `logits`: the target's raw logits at each position
    (`generation_logits`)."""

    log_probs: bool = False
    normalize: bool = True
    logits: bool = False
    token_log_probs: list[float] = field(default_factory=list)
    token_logits: list[torch.Tensor] = field(default_factory=list)

    def record(
        self,
        tokens: Sequence[int],
        processed: torch.Tensor,
        raw: torch.Tensor,
        rows: Sequence[int],
        sp: SamplingParams,
    ) -> None:
        """Token j was chosen at row `rows[j]` of `processed` (and of the raw logits `raw`)."""
        for tok, r in zip(tokens, rows, strict=True):
            if self.log_probs:
                self.token_log_probs.append(log_prob(processed[r], tok, sp, self.normalize))
            if self.logits:
                self.token_logits.append(raw[r].float().clone())


def log_prob(processed: torch.Tensor, token: int, sp: SamplingParams, normalize: bool) -> float:
    if normalize:
        if sp.greedy:
            return 0.0
        p = float(probs(processed, sp)[token])
        return math.log(p) if p > 0 else float("-inf")
    t = 1.0 if sp.greedy else sp.temperature
    return float(torch.log_softmax(processed.float() / t, -1)[token])
