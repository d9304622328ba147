"""The numerics-aware correctness gate on a served bf16 deployment: recipes/tiny-lookahead-bf16.yaml
deployed on the embedded Triton (the reference `tensorrt_llm` runs the tiny target in bfloat16),
validated by `validate_deployment` with its recipe, as `sdtk validate` / `sdtk deploy` do.

Served lookahead parts from plain bf16 decoding (the in-process baseline, in the recipe's dtype) at
the target's near-ties: over the 24 prompts of toolkit/reference/prompts.py, 3 diverge (13 at
token 28, 15 at token 11, 23 at token 0; margins 0.015, -0.006, -0.058 by the float32 target),
21 are identical. The gate passes them as ties under bf16's threshold (0.25) and names them;
`--strict` fails the same deployment. A deliberately lossy deployment (the test-only
SDTK_TEST_LOSSY_VERIFY switch: every draft accepted unchecked) fails the gate with margins far
above the threshold.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from triton_support import live_deployment

from toolkit.reference.prompts import PROMPTS
from toolkit.reference.runtime import LOSSY_ENV

pytestmark = [pytest.mark.tritonserver, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "tiny-lookahead-bf16.yaml"
# Three prompts that part at a tie served in bf16, and one that does not.
CHOSEN = (PROMPTS[13], PROMPTS[15], PROMPTS[23], PROMPTS[0])
TOKENS = 32


def _validate(result: Any, recipe: Any, strict: bool = False) -> Any:
    from toolkit.validate import ValidateOptions, validate_deployment

    return validate_deployment(
        http_url=result.http_url,
        grpc_url=None,
        model=result.model,
        recipe=recipe,
        options=ValidateOptions(prompts=CHOSEN, max_tokens=TOKENS, strict=strict),
        progress=None,
    )


def _check(report: Any, name: str) -> Any:
    return next(c for c in report.checks if c.name == name)


def test_served_bf16_deployment_passes_the_gate_at_real_ties(tmp_path: Path) -> None:
    from toolkit.recipe import load_recipe

    recipe = load_recipe(str(RECIPE))
    with live_deployment(recipe, tmp_path / "bf16") as result:
        # The served target computes in bf16: its generation logits are bf16 values (the low 16
        # bits of each float32 are zero), which float32 logits almost never all are.
        body = {"text_input": PROMPTS[0], "max_tokens": 1, "return_generation_logits": True}
        r = httpx.post(f"{result.http_url}/v2/models/{result.model}/generate", json=body, timeout=60)
        logits = np.array(r.json()["generation_logits"], dtype=np.float32).reshape(-1)
        assert logits.size == 2048 and not (logits.view(np.uint32) & 0xFFFF).any()

        report = _validate(result, recipe)
        check = _check(report, "correctness")
        assert check.status == "passed", check.detail
        assert report.gate["dtype"] == "bfloat16" and report.gate["tie_threshold"] == 0.25
        assert report.gate["log_probs"] == "the target in process (float32)"
        assert report.baseline == "in-process reference runtime, speculation off (bfloat16)"
        ties = [d for d in report.divergences if d["tie"]]
        assert len(ties) >= 1, "no served bf16 divergence: the test would prove nothing"
        assert len(ties) == len(report.divergences)
        assert all(abs(d["margin"]) <= 0.25 and d["served_token"] != d["baseline_token"] for d in ties)
        assert f"{len(ties)} diverged at a tie (|margin| ≤ 0.25, bfloat16" in check.detail
        # The same deployment under the exact rule: the tie-divergences fail it.
        strict = _check(_validate(result, recipe, strict=True), "correctness")
        assert strict.status == "failed" and "differs from the baseline" in strict.detail


def test_served_lossy_deployment_fails_the_gate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The test-only lossy verifier, switched on in the server's environment (its stubs inherit
    it): every draft is taken without comparing it with the target's choice."""
    from toolkit.recipe import load_recipe

    recipe = load_recipe(str(RECIPE), ["name=tiny-lookahead-bf16-lossy"])
    monkeypatch.setenv(LOSSY_ENV, "1")
    with live_deployment(recipe, tmp_path / "lossy") as result:
        report = _validate(result, recipe)
    check = _check(report, "correctness")
    assert check.status == "failed", check.detail
    assert check.detail.startswith("not a tie: prompt ")
    wrong = [d for d in report.divergences if not d["tie"]]
    assert wrong and all(d["margin"] > 0.25 for d in wrong)
