"""The gate on real bf16 numerics: the tiny target run in bfloat16 (CPU kernels), where a
verification forward over several tokens and a one-token decode step take different GEMM shapes.
Lookahead decoding then parts from plain decoding at the target's near-ties, and the gate accepts
those as ties; a lossy verifier that takes every draft without checking it is rejected.

Which prompts part depends on the CPU's bf16 GEMM kernels, so the test finds them on the host it
runs on (all 24 code prompts, none diverge in float32): on an AVX-512 host prompts 1 and 12 (of 4),
on an AVX2 host (AMD EPYC Zen 1, torch 2.13 CPU) prompts 4 (token 24) and 23 (token 0)."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

from toolkit.reference import PLAIN
from toolkit.reference.models import CachedLM
from toolkit.reference.prompts import PROMPTS
from toolkit.validate import ValidationReport, _correctness, _GateSetup

ROOT = Path(__file__).resolve().parents[2]
N = 32


@pytest.fixture(scope="module")
def bf16(runtime: Any) -> Any:
    """A copy of the session runtime whose target computes in bfloat16."""
    rt = copy.copy(runtime)
    rt.target = CachedLM(copy.deepcopy(runtime.target.model).to(torch.bfloat16))
    rt.batcher = None
    return rt


@pytest.fixture(scope="module")
def gate() -> Any:
    """validate's gate for a bf16 deployment of the tiny target: log-probs from the float32 target
    in process, the bf16 threshold."""
    from toolkit.recipe import load_recipe

    recipe = load_recipe(str(ROOT / "recipes" / "tiny-baseline.yaml"))
    setup = _GateSetup.make(recipe, "http://127.0.0.1:9", None, "ensemble", strict=False)
    return dataclasses.replace(setup, dtype="bfloat16")


def texts(rt: Any, spec: Any, prompts: Sequence[str]) -> list[tuple[str, str, str]]:
    """(prompt, served = speculative, baseline = plain), both in the runtime's dtype."""
    out = []
    for prompt in prompts:
        ids = rt.tokenizer(prompt)["input_ids"]
        plain = rt.generate(ids, N, spec=PLAIN, end_id=-1).token_ids
        served = rt.generate(ids, N, spec=spec, end_id=-1).token_ids
        out.append((prompt, *(rt.tokenizer.decode(t, skip_special_tokens=True) for t in (served, plain))))
    return out


# Prompts seen to part in bf16 on the hosts above, tried first; the other prompts only if none does.
SEEN = (1, 12, 4, 23)
FIRST = (*SEEN, 0)  # and one prompt that parted on neither


@pytest.fixture(scope="module")
def bf16_texts(bf16: Any, specs: dict[str, Any]) -> list[tuple[str, str, str]]:
    """This host's bf16 lookahead divergences from bf16 plain decoding, plus one prompt that does
    not diverge."""
    first = texts(bf16, specs["lookahead"], [PROMPTS[i] for i in FIRST])
    parted = [t for t in first if t[1] != t[2]]
    if not parted:
        rest = [p for i, p in enumerate(PROMPTS) if i not in FIRST]
        parted = [t for t in texts(bf16, specs["lookahead"], rest) if t[1] != t[2]]
    assert parted, "no bf16 divergence on any of the 24 prompts: the test would prove nothing"
    return [*parted, *[t for t in first if t[1] == t[2]][:1]]


def test_bf16_tie_divergences_pass_the_gate(bf16_texts: list[tuple[str, str, str]], gate: Any) -> None:
    report = ValidationReport("m", "u", None, "b")
    status, detail = _correctness(report, bf16_texts, gate, "bf16 plain decoding")
    assert status == "passed", detail
    ties = [d for d in report.divergences if d["tie"]]
    assert len(ties) >= 1, "no bf16 divergence: the test would prove nothing"
    assert all(abs(d["margin"]) <= 0.25 for d in ties)
    assert f"{len(ties)} diverged at a tie (|margin| ≤ 0.25, bfloat16" in detail
    strict = dataclasses.replace(gate, strict=True)
    assert _correctness(ValidationReport("m", "u", None, "b"), bf16_texts, strict, "")[0] == "failed"


def test_a_lossy_deployment_fails_the_gate(
    bf16: Any,
    bf16_texts: list[tuple[str, str, str]],
    gate: Any,
    specs: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The test-only lossy verifier: every first-child draft is taken without comparing it to the
    target's choice; the gate must fail, naming a divergence that is no tie."""
    import toolkit.reference.runtime as runtime_module

    monkeypatch.setattr(runtime_module, "verify", runtime_module.accept_every_draft)
    report = ValidationReport("m", "u", None, "b")
    lossy = texts(bf16, specs["lookahead"], [t[0] for t in bf16_texts])
    status, detail = _correctness(report, lossy, gate, "bf16 plain decoding")
    assert status == "failed", detail
    wrong = [d for d in report.divergences if not d["tie"]]
    assert wrong and all(d["margin"] > 0.25 for d in wrong)
    assert detail.startswith("not a tie: prompt ")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_runtime_computes_in_the_recipes_dtype(tiny: Path, specs: dict[str, Any], dtype: str) -> None:
    """ReferenceRuntime.load(dtype=...) (the engine directory's pretrained_config.dtype, as the
    served model reads it): the target, the draft and both kinds of heads in that dtype, the rotary
    frequencies in float32; every mode and the batched path (the served one) run in it."""
    from toolkit.errors import ModelError
    from toolkit.reference import ReferenceRuntime, SamplingParams

    rt = ReferenceRuntime.load(
        tiny / "target",
        {"draft": tiny / "draft", "medusa_heads": tiny / "medusa", "eagle_head": tiny / "eagle3"},
        dtype=dtype,
    )
    want = getattr(torch, dtype)
    assert rt.dtype == dtype
    head = rt.weights["eagle_head"]
    parts = [rt.target.model, rt.draft.model, rt.weights["medusa_heads"], head.fc, head.layers, head.lm_head]
    assert {p.dtype for m in parts for p in m.parameters()} == {want}
    assert rt.target.model.model.rotary_emb.inv_freq.dtype == head.rotary.inv_freq.dtype == torch.float32
    ids = rt.tokenizer(PROMPTS[0])["input_ids"]
    plain = rt.generate(ids, 12, spec=PLAIN, end_id=-1).token_ids
    for mode in ("draft_target", "eagle3_tree", "medusa", "lookahead", "ngram"):
        assert len(rt.generate(ids, 12, spec=specs[mode], end_id=-1).token_ids) == 12
    sampled = rt.generate(
        ids, 12, spec=specs["eagle3_chain"], sampling=SamplingParams(1.0, seed=3), end_id=-1
    )
    assert len(sampled.token_ids) == 12
    rt.enable_batching(2, 256)  # the KV pool and the additive mask in the model's dtype
    assert rt.batcher.target_pool.keys[0].dtype == want
    assert rt.generate(ids, 12, spec=PLAIN, end_id=-1).token_ids == plain
    with pytest.raises(ModelError, match="float32, bfloat16, float16, not int8"):
        ReferenceRuntime.load(tiny / "target", dtype="int8")
