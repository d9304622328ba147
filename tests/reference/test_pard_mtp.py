"""PARD and MTP in the reference runtime, on the shipped tiny weights (models/tiny/pard: a PARD draft;
models/tiny/mtp: the tiny target plus one MTP layer): greedy output equal to transformers' greedy on
the test prompts (toolkit.reference.prompts, not in the training data), sampling keeping the
target's distribution (χ² of the first two emitted tokens, the harness of test_chi2_modes), and the
drafts accepted often enough that both are tested on real proposals."""

from __future__ import annotations

from typing import Any

import pytest

from toolkit.modes.mtp import Mtp
from toolkit.modes.pard import Pard

from .conftest import NEW_TOKENS
from .test_chi2_modes import REPEATING, SETTINGS, first_step, sample_and_match
from .test_lossless import divergence_problem

SPECS = {"pard": Pard(mode="pard", max_draft_len=4), "mtp": Mtp(mode="mtp", max_draft_len=2)}


@pytest.fixture(scope="module")
def pard_rt(tiny: Any) -> Any:
    from toolkit.reference import ReferenceRuntime

    return ReferenceRuntime.load(tiny / "target", {"draft": tiny / "pard"}, spec=SPECS["pard"])


@pytest.fixture(scope="module")
def mtp_rt(tiny: Any) -> Any:
    from toolkit.reference import ReferenceRuntime

    return ReferenceRuntime.load(tiny / "mtp", spec=SPECS["mtp"])


@pytest.fixture
def rt(mode: str, request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(f"{mode}_rt")


@pytest.mark.slow  # over 5 s (about 15-26 s each on the 2-core box)
@pytest.mark.parametrize("mode", SPECS)
def test_greedy_output_equals_transformers_generate(
    mode: str,
    rt: Any,
    prompt_ids: list[list[int]],
    greedy_reference: list[list[int]],
    hf_target: Any,
    end_id: int,
) -> None:
    problems, accepted, steps, tokens = [], 0, 0, 0
    for ids, ref in zip(prompt_ids, greedy_reference, strict=True):
        result = rt.generate(ids, NEW_TOKENS, end_id=end_id)
        accepted += result.stats.accepted_tokens
        steps += result.stats.steps
        tokens += result.stats.tokens
        problem = divergence_problem(hf_target, ids, result.token_ids, ref)
        if problem:
            problems.append(f"prompt {ids[:8]}...: {problem}")
    assert not problems, "\n".join(problems)
    # The shipped weights draft something the target takes: well above one token per step.
    assert tokens / steps > 1.3, f"{mode}: τ {tokens / steps:.2f} ({accepted} drafts accepted)"


@pytest.mark.parametrize("setting", SETTINGS)
@pytest.mark.parametrize("mode", SPECS)
def test_sample_and_match_keeps_the_target_distribution(
    mode: str, setting: str, rt: Any, hf_target: Any
) -> None:
    sp = SETTINGS[setting]
    ids = rt.tokenizer(REPEATING)["input_ids"]
    prop, logits = first_step(rt, ids, SPECS[mode], sp)
    assert prop.num_draft == SPECS[mode].max_draft_len
    p1, p2 = sample_and_match(hf_target, ids, prop, logits, sp)
    assert p1 > 1e-3 and p2 > 1e-3, f"{mode} {setting}: p-values {p1:.2g}, {p2:.2g}"


@pytest.mark.parametrize("mode", SPECS)
def test_sampled_generation_runs_the_whole_loop(mode: str, rt: Any, prompt_ids: list[list[int]]) -> None:
    """Temperature 1 through generate (drafts, sample-and-match, the drafter's updates), seeded: the
    same seed gives the same tokens."""
    from toolkit.reference import SamplingParams

    sp = SamplingParams(temperature=1.0, seed=7)
    a = rt.generate(prompt_ids[0], 24, sampling=sp).token_ids
    assert len(a) == 24 and a == rt.generate(prompt_ids[0], 24, sampling=sp).token_ids


@pytest.mark.slow  # over 5 s for mtp under load
@pytest.mark.parametrize("mode", SPECS)
def test_batched_greedy_equals_transformers(
    mode: str,
    tiny: Any,
    prompt_ids: list[list[int]],
    greedy_reference: list[list[int]],
    hf_target: Any,
    end_id: int,
) -> None:
    """In-flight batching (the served path): the draft's forwards (PARD) and the target's hidden
    states (MTP) come through the batcher; 8 prompts from 4 threads."""
    from toolkit.reference import ReferenceRuntime

    from .test_batching import run_concurrently

    target, draft = (tiny / "target", tiny / "pard") if mode == "pard" else (tiny / "mtp", None)
    rt = ReferenceRuntime.load(target, {"draft": draft}, spec=SPECS[mode])
    rt.enable_batching(max_batch_size=4, capacity=256)
    try:
        results = run_concurrently(rt, prompt_ids[:8], 4, end_id=end_id)
    finally:
        rt.batcher.close()
    problems = [
        p
        for ids, r, ref in zip(prompt_ids[:8], results, greedy_reference[:8], strict=True)
        if (p := divergence_problem(hf_target, ids, r.token_ids, ref))
    ]
    assert not problems, "\n".join(problems)
    assert max(n for n, k in rt.batcher.batch_sizes.items() if k > 0) > 1, "the requests never shared a batch"
    assert sum(r.stats.accepted_tokens for r in results) > 0


def test_mtp_on_the_memory_bound_twin(tiny: Any, prompt_ids: list[list[int]], end_id: int) -> None:
    """The twin pads the loaded target's MLP; the MTP layer keeps the checkpoint's own shapes, and the
    output is the plain runtime's."""
    from toolkit.reference import ReferenceRuntime

    twin = ReferenceRuntime.load(tiny / "mtp", spec=SPECS["mtp"], inflate=4)
    plain = ReferenceRuntime.load(tiny / "mtp", spec=SPECS["mtp"])
    a = twin.generate(prompt_ids[0], 16, end_id=end_id)
    assert a.token_ids == plain.generate(prompt_ids[0], 16, end_id=end_id).token_ids
    assert a.stats.accepted_tokens > 0


@pytest.mark.slow  # writes the self-test's checkpoints (about 10 s) and runs two targets
def test_mtp_on_an_mla_target_in_process_and_batched(tmp_path: Any) -> None:
    """A DeepSeek-V3 target (MLA: keys of qk_nope + qk_rope = 192 wide, values of v_head_dim = 128, as
    transformers runs it) with one MTP layer: the self-test's MTP cell target. Greedy output equals
    transformers' greedy in process (the preallocated KV cache leaves MLA layers to DynamicLayers)
    and under in-flight batching (the slot pool sizes keys and values apart)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from toolkit.reference import ReferenceRuntime
    from toolkit.selftest.checkpoints import MTP_TARGET, PROMPTS, make_checkpoints

    from .test_batching import run_concurrently

    path = make_checkpoints(tmp_path / "checkpoints")[MTP_TARGET]
    tok = AutoTokenizer.from_pretrained(path)
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    prompts = [tok(p).input_ids for p in PROMPTS]
    with torch.no_grad():
        want = [
            hf.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False)[0, len(ids) :].tolist()
            for ids in prompts
        ]
    rt = ReferenceRuntime.load(path, spec=SPECS["mtp"])
    assert [rt.generate(ids, NEW_TOKENS).token_ids for ids in prompts] == want
    rt.enable_batching(max_batch_size=3, capacity=64)
    try:
        results = run_concurrently(rt, prompts, 3)
    finally:
        rt.batcher.close()
    assert [r.token_ids for r in results] == want
