"""In-flight batching in the reference runtime: concurrent generate() calls share one batched
forward per iteration, and every request's greedy output still equals transformers' generate."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from .conftest import MODES, NEW_TOKENS
from .test_lossless import divergence_problem

pytestmark = pytest.mark.slow  # each test generates for every held-out prompt (seconds to a minute)


@pytest.fixture(scope="module")
def batched(tiny: Any) -> Any:
    from toolkit.reference import ReferenceRuntime

    rt = ReferenceRuntime.load(
        tiny / "target",
        {"draft": tiny / "draft", "medusa_heads": tiny / "medusa", "eagle_head": tiny / "eagle3"},
    )
    rt.enable_batching(max_batch_size=8, capacity=256)
    yield rt
    rt.batcher.close()


def run_concurrently(rt: Any, prompts: list[list[int]], concurrency: int, **kw: Any) -> list[Any]:
    """generate() for every prompt from `concurrency` threads, each taking the next prompt."""
    results: list[Any] = [None] * len(prompts)
    errors: list[BaseException] = []
    lock = threading.Lock()
    todo = iter(range(len(prompts)))

    def worker() -> None:
        while True:
            with lock:
                k = next(todo, None)
            if k is None:
                return
            try:
                results[k] = rt.generate(prompts[k], NEW_TOKENS, **kw)
            except BaseException as e:  # noqa: BLE001 - re-raised below
                errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


# Concurrency 1 and 4 run through the served path (tests/repo/test_served_batching.py).
@pytest.mark.parametrize("concurrency", [8])
@pytest.mark.parametrize("mode", MODES)
def test_batched_greedy_equals_transformers(
    batched, specs, prompt_ids, greedy_reference, hf_target, end_id, mode, concurrency
):
    before = dict(batched.batcher.batch_sizes)
    results = run_concurrently(batched, prompt_ids, concurrency, spec=specs[mode], end_id=end_id)
    problems = [
        f"prompt {ids[:8]}...: {p}"
        for ids, r, ref in zip(prompt_ids, results, greedy_reference, strict=True)
        if (p := divergence_problem(hf_target, ids, r.token_ids, ref))
    ]
    assert not problems, "\n".join(problems)
    grown = {n: k - before.get(n, 0) for n, k in batched.batcher.batch_sizes.items()}
    assert max(n for n, k in grown.items() if k > 0) == concurrency, "the requests never shared a batch"
    if mode != "none":
        assert sum(r.stats.accepted_tokens for r in results) > 0


def test_draft_len_schedule_and_max_concurrency_follow_the_batch(batched, prompt_ids, end_id):
    """TRT-LLM semantics: the largest schedule threshold <= the batch size gives the draft length
    (0 = off), and speculation is off while the batch holds more than max_concurrency requests."""
    from toolkit.recipe import NGram

    sched = NGram(
        mode="ngram", max_draft_len=4, max_matching_ngram_size=3, draft_len_schedule={1: 4, 2: 2, 4: 0}
    )
    alone = run_concurrently(batched, prompt_ids[:4], 1, spec=sched, end_id=end_id)
    assert max(len(r.stats.per_position_proposed) for r in alone) == 4  # batch of 1: the full length
    crowd = run_concurrently(batched, prompt_ids[:8], 8, spec=sched, end_id=end_id)
    # Draft lengths above 2 only while fewer than 2 requests ran; none at all from 4 on.
    assert sum(r.stats.draft_tokens for r in crowd) < sum(r.stats.steps for r in crowd) * 2
    capped = NGram(mode="ngram", max_draft_len=4, max_matching_ngram_size=3, max_concurrency=1)
    many = run_concurrently(batched, prompt_ids[:8], 8, spec=capped, end_id=end_id)
    alone = run_concurrently(batched, prompt_ids[:8], 1, spec=capped, end_id=end_id)
    assert sum(r.stats.draft_tokens for r in many) < sum(r.stats.draft_tokens for r in alone)
    for a, b in zip(many, alone, strict=True):
        assert a.token_ids == b.token_ids


def test_adaptive_draft_len_is_reported_and_lossless(
    runtime, prompt_ids, greedy_reference, hf_target, end_id
):
    from toolkit.recipe import Eagle3

    fixed = Eagle3(mode="eagle3", max_draft_len=5)
    adaptive = Eagle3(mode="eagle3", max_draft_len=5, adaptive_draft_len=True)
    hist: dict[int, int] = {}
    for ids, ref in zip(prompt_ids, greedy_reference, strict=True):
        r = runtime.generate(ids, NEW_TOKENS, spec=adaptive, end_id=end_id)
        assert divergence_problem(hf_target, ids, r.token_ids, ref) is None
        for k, v in r.stats.draft_len_histogram.items():
            hist[k] = hist.get(k, 0) + v
    # A fixed draft length reports no histogram: a property of the configuration, shown on one prompt
    # (it was repeated for every prompt: 24 more generations of NEW_TOKENS, nothing else checked).
    ids = prompt_ids[0]
    assert runtime.generate(ids, NEW_TOKENS, spec=fixed, end_id=end_id).stats.draft_len_histogram == {}
    assert len(hist) > 1 and max(hist) <= 5 and min(hist) >= 1  # it did move


def test_schedule_survives_the_engine_config_json():
    """The engine directory stores the speculative section as JSON, whose keys are strings: a
    draft_len_schedule must load back (it once failed the deployment: "Input should be a valid
    integer")."""
    import json

    from toolkit.recipe import load_recipe
    from toolkit.reference.runtime import parse_speculative

    rec = load_recipe(
        "tiny-eagle3", ["speculative.max_draft_len=3", "speculative.draft_len_schedule={1: 3, 4: 1, 8: 0}"]
    )
    back = parse_speculative(json.loads(json.dumps(rec.speculative.model_dump())))
    assert back.draft_len_schedule == {1: 3, 4: 1, 8: 0} == rec.speculative.draft_len_schedule
