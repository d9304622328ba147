"""Penalties, min_tokens, bad words and log probs (the knobs and outputs TensorRT-LLM serves), against
transformers: `generate` with the same logits processors is the yardstick, and every speculative
mode must reproduce it (each verification row is processed with its own prefix)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hf_yardstick import hf_processors

from toolkit.reference import PLAIN, SamplingParams
from toolkit.reference.processors import Processors, Trace

from .conftest import MODES

N = 24
REP, PRES, FREQ = 1.3, 0.4, 0.3


def request_processors(runtime: Any, ids: list[int], end_id: int) -> Processors:
    """Penalties that change the plain greedy output, a bad word of one and one of two tokens taken
    from it, and min_tokens past its first EOS."""
    plain = runtime.generate(ids, N, spec=PLAIN, end_id=end_id).token_ids
    return Processors(
        repetition_penalty=REP,
        presence_penalty=PRES,
        frequency_penalty=FREQ,
        min_tokens=N // 2,
        end_id=end_id,
        bad_words=((plain[2],), (plain[4], plain[5])),
    )


@pytest.fixture(scope="module")
def processed_greedy(runtime: Any, hf_target: Any, prompt_ids: list[list[int]], end_id: int) -> list[tuple]:
    """(prompt, processors, transformers' processed greedy continuation) for two prompts."""
    out = []
    for ids in prompt_ids[:2]:
        proc = request_processors(runtime, ids, end_id)
        with torch.inference_mode():
            seq = hf_target.generate(
                torch.tensor([ids]),
                do_sample=False,
                max_new_tokens=N,
                logits_processor=hf_processors(proc, len(ids), end_id),
            )
        want = seq[0, len(ids) :].tolist()
        assert want != runtime.generate(ids, N, spec=PLAIN, end_id=end_id).token_ids, (
            "the processors changed nothing: the test would prove nothing"
        )
        out.append((ids, proc, want))
    return out


@pytest.mark.parametrize("mode", MODES)
def test_processors_greedy_equal_transformers_in_every_mode(
    mode: str, runtime: Any, specs: dict[str, Any], processed_greedy: list[tuple], end_id: int
) -> None:
    accepted = 0
    for ids, proc, want in processed_greedy:
        got = runtime.generate(ids, N, spec=specs[mode], end_id=end_id, processors=proc)
        assert got.token_ids == want, f"{mode}: {got.token_ids} != transformers {want}"
        accepted += got.stats.accepted_tokens
    # The penalties discourage the repeats that n-gram and lookahead copy; model drafters must hit.
    if mode in ("draft_target", "medusa", "eagle3_chain", "eagle3_tree"):
        assert accepted > 0, f"{mode} accepted no draft token"


def test_bad_words_and_min_tokens_alone(runtime: Any, prompt_ids: list[list[int]], end_id: int) -> None:
    ids = prompt_ids[0]
    plain = runtime.generate(ids, N, spec=PLAIN, end_id=end_id).token_ids
    banned = Processors(bad_words=((plain[0],),))
    got = runtime.generate(ids, N, spec=PLAIN, end_id=end_id, processors=banned).token_ids
    assert got[0] != plain[0] and plain[0] not in got
    # min_tokens holds the end id back: an end id that greedy picks first is never picked early.
    forced = Processors(min_tokens=5, end_id=plain[0])
    got = runtime.generate(ids, 6, spec=PLAIN, end_id=plain[0], processors=forced).token_ids
    assert plain[0] not in got[:5]


def hf_log_probs(
    hf_target: Any, ids: list[int], out: list[int], proc: Processors, eos: int, sp: SamplingParams
) -> list[float]:
    """Teacher-forced: transformers' logits for the twin's tokens, through transformers' processors
    and warpers, log-softmaxed (the sampling distribution each token was drawn from)."""
    from transformers import TopKLogitsWarper, TopPLogitsWarper

    chain = hf_processors(proc, len(ids), eos, temperature=None if sp.greedy else sp.temperature)
    if sp.top_k:
        chain.append(TopKLogitsWarper(sp.top_k))
    if sp.top_p < 1.0:
        chain.append(TopPLogitsWarper(sp.top_p))
    full = torch.tensor([ids + out])
    with torch.inference_mode():
        logits = hf_target(full).logits[0].float()
    got = []
    for j, tok in enumerate(out):
        pos = len(ids) + j
        scores = chain(full[:, :pos], logits[pos - 1 : pos].clone())
        got.append(float(torch.log_softmax(scores, -1)[0, tok]))
    return got


@pytest.mark.parametrize("mode", ["draft_target", "eagle3_tree"])
def test_log_probs_equal_transformers(
    mode: str, runtime: Any, specs: dict[str, Any], hf_target: Any, prompt_ids: list[list[int]], end_id: int
) -> None:
    ids = prompt_ids[4]
    proc = request_processors(runtime, ids, end_id)
    sp = SamplingParams(temperature=0.7, top_p=0.9, seed=3)
    trace = Trace(log_probs=True, logits=True)
    out = runtime.generate(
        ids, N, spec=specs[mode], sampling=sp, end_id=-1, processors=proc, trace=trace
    ).token_ids
    want = hf_log_probs(hf_target, ids, out, proc, end_id, sp)
    assert torch.allclose(torch.tensor(trace.token_log_probs[: len(out)]), torch.tensor(want), atol=1e-4)
    assert min(want) < -0.05  # sampled tokens of some uncertainty: the comparison has teeth
    with torch.inference_mode():
        raw = hf_target(torch.tensor([ids + out])).logits[0, len(ids) - 1 : -1]
    assert torch.allclose(torch.stack(trace.token_logits[: len(out)]), raw, atol=1e-4)
    # Greedy, unnormalised (normalize_log_probs false): log_softmax of the processed logits, as
    # transformers' compute_transition_scores gives them; normalised, greedy tokens get 0.
    greedy = Trace(log_probs=True, normalize=False)
    out = runtime.generate(ids, N, spec=specs[mode], end_id=-1, processors=proc, trace=greedy).token_ids
    want = hf_log_probs(hf_target, ids, out, proc, end_id, SamplingParams())
    assert torch.allclose(torch.tensor(greedy.token_log_probs[: len(out)]), torch.tensor(want), atol=1e-4)
    normalized = Trace(log_probs=True)
    runtime.generate(ids, 4, spec=specs[mode], end_id=-1, processors=proc, trace=normalized)
    assert normalized.token_log_probs[:4] == [0.0] * 4


def test_verify_draft_processes_each_row_with_its_prefix(
    runtime: Any, hf_target: Any, prompt_ids: list[list[int]], end_id: int
) -> None:
    """The BLS path (draft_tokens_external): a draft of the processed greedy continuation is
    accepted whole, and the target's own continuation is what transformers' processed greedy is."""
    ids = prompt_ids[2]
    proc = request_processors(runtime, ids, end_id)
    with torch.inference_mode():
        seq = hf_target.generate(
            torch.tensor([ids]),
            do_sample=False,
            max_new_tokens=8,
            logits_processor=hf_processors(proc, len(ids), end_id),
        )
    want = seq[0, len(ids) :].tolist()
    trace = Trace(log_probs=True, normalize=False)
    good = runtime.verify_draft(ids, want[:5], end_id=-1, processors=proc, trace=trace)
    assert good.new_tokens == want[:6] and good.accepted == 5
    assert len(trace.token_log_probs) == 6
    plain = runtime.generate(ids, 8, spec=PLAIN, end_id=-1).token_ids
    bad = runtime.verify_draft(ids, plain[:5], end_id=-1, processors=proc)
    k = next(i for i, (a, b) in enumerate(zip(plain, want, strict=False)) if a != b)
    assert bad.accepted == k and bad.new_tokens == want[: k + 1]
