"""The numerics-aware correctness gate (toolkit/gate.py, validate's correctness check) on the tiny
target, with the target in process as the source of log-probs: a divergence at one of the
target's real near-ties passes under the bf16 threshold and fails under float32's; a token the
target ranks far below its own fails, naming prompt, position, tokens and margin; `strict` keeps
the exact rule."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch

from toolkit.gate import TIE_MARGIN, first_divergence
from toolkit.reference import PLAIN
from toolkit.reference.prompts import PROMPTS
from toolkit.validate import ValidationReport, _correctness, _GateSetup

ROOT = Path(__file__).resolve().parents[2]
N = 24


def test_first_divergence() -> None:
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert first_divergence([1, 2], [1, 2, 3]) == 2


@pytest.fixture(scope="module")
def cases() -> tuple[Any, list[tuple[str, str, str]], list[tuple[str, str, str]], float]:
    """(gate setup, tie texts, wrong-token texts, the tie's margin): (prompt, served, baseline)
    triples where the served ids part from the target's greedy ids at its closest near-tie, or
    take its 5th choice at a confident position; only sequences that tokenize back to themselves."""
    from toolkit.generate import _runtime
    from toolkit.recipe import load_recipe

    recipe = load_recipe(str(ROOT / "recipes" / "tiny-baseline.yaml"))
    gate = _GateSetup.make(recipe, "http://127.0.0.1:9", None, "ensemble", strict=False)
    assert gate.scorer is not None and gate.dtype == "float32"
    rt = _runtime(recipe)
    tok = rt.tokenizer

    def text(ids: list[int]) -> str | None:
        out = tok.decode(ids, skip_special_tokens=True)
        return out if tok(out, add_special_tokens=False)["input_ids"] == ids else None

    ties, wrong = [], []
    for prompt in PROMPTS[:8]:
        ids = tok(prompt)["input_ids"]
        base = rt.generate(ids, N, spec=PLAIN, end_id=-1).token_ids
        with torch.inference_mode():
            logits = rt.target.model(torch.tensor([ids + base])).logits[0, len(ids) - 1 : -1]
        top = torch.topk(logits, 5)
        gaps = (top.values[:, 0] - top.values[:, 1]).tolist()
        for j, gap in enumerate(gaps):
            want = text(base)
            if want is None:
                break
            if gap < 0.1:
                served = text(base[:j] + [int(top.indices[j, 1])])
                if served is not None:
                    ties.append((gap, (prompt, served, want)))
            elif gap > 2:
                served = text(base[:j] + [int(top.indices[j, 4])])
                if served is not None:
                    wrong.append((prompt, served, want))
    assert ties and wrong, "the tiny target has no usable near-tie or confident position"
    gap, tie = min(ties)
    return gate, [tie], wrong[:1], gap


def test_a_tie_passes_in_bf16_and_fails_in_float32(cases: Any) -> None:
    gate, tie, _, gap = cases
    prompt, served, baseline = tie[0]
    same = (PROMPTS[-1], "x = 1", "x = 1")
    bf16 = dataclasses.replace(gate, dtype="bfloat16")
    report = ValidationReport("m", "u", None, "b")
    status, detail = _correctness(report, [*tie, same], bf16, "baseline")
    assert status == "passed", detail
    assert "1 of 2 prompts identical to the baseline, 1 diverged at a tie" in detail
    (d,) = report.divergences
    assert d["tie"] and d["prompt"] == prompt and abs(d["margin"] - gap) < 1e-4 <= TIE_MARGIN["bfloat16"]
    assert report.gate == {
        "rule": "ids, ties allowed",
        "dtype": "bfloat16",
        "tie_threshold": 0.25,
        "log_probs": "the target in process (float32)",
    }
    # The same divergence in a float32 deployment is a real difference (the gap is above 1e-4).
    assert gap > TIE_MARGIN["float32"]
    status, detail = _correctness(ValidationReport("m", "u", None, "b"), tie, gate, "baseline")
    assert status == "failed" and detail.startswith("not a tie: ") and "0 diverged at a tie" in detail
    # --strict: identical text or fail.
    strict = dataclasses.replace(gate, strict=True, source="strict: identical text")
    status, detail = _correctness(ValidationReport("m", "u", None, "b"), tie, strict, "baseline")
    assert status == "failed" and "first difference" in detail


def test_a_wrong_token_fails_naming_prompt_position_tokens_and_margin(cases: Any) -> None:
    gate, tie, wrong, _ = cases
    bf16 = dataclasses.replace(gate, dtype="bfloat16")
    report = ValidationReport("m", "u", None, "b")
    status, detail = _correctness(report, [*tie, *wrong], bf16, "baseline")
    assert status == "failed"
    bad = next(d for d in report.divergences if not d["tie"])
    assert bad["margin"] > 2 and bad["prompt"] == wrong[0][0]
    assert f"prompt {wrong[0][0]!r}: token {bad['position']} served {bad['served_token']}" in detail
    assert f"baseline {bad['baseline_token']}" in detail and "1 diverged at a tie" in detail
