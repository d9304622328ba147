"""In-flight batching through a real Triton: the held-out losslessness prompts at concurrency 1, 4
and 8 give, request by request, the text of the target's own Hugging Face greedy `generate`,
whatever the batch they share (target-only ensemble, BLS draft-target, EAGLE-3 chain, n-gram).
The server's own /metrics (nv_trt_llm_request_metrics, sdtk_reference_batch_size_max) say that
requests really shared a batch, up to the engine's max_batch_size of 8."""

from __future__ import annotations

import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from triton_support import serving

from .test_triton_integration import _post, _serve, tiny  # noqa: F401 - tiny is a fixture

pytestmark = [pytest.mark.tritonserver, pytest.mark.slow]

NEW_TOKENS = 24
CONCURRENCY = (1, 4, 8)


def _batching_metrics(url: str, model: str = "tensorrt_llm") -> dict[str, float]:
    """The target model's batching gauges, read off Triton's /metrics (independent of sdtk's client)."""
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for sample in fam.samples:
            if sample.labels.get("model") != model:
                continue
            if sample.name == "nv_trt_llm_request_metrics":
                out[sample.labels["request_type"]] = sample.value
            elif sample.name == "nv_trt_llm_general_metrics":
                out[sample.labels["general_type"]] = sample.value
            elif sample.name == "sdtk_reference_batch_size_max":
                out["peak"] = sample.value
    return out


def _settled(url: str) -> dict[str, float]:
    """Metrics once the sampler (every 0.25 s) has seen the batch drain."""
    deadline = time.monotonic() + 10
    while True:
        m = _batching_metrics(url)
        if m.get("active") == 0 and m.get("waiting") == 0 or time.monotonic() > deadline:
            return m
        time.sleep(0.1)


@pytest.fixture(scope="module")
def hf_expected(tiny) -> dict[str, str]:  # noqa: F811
    """transformers' own greedy generate per prompt, decoded as the ensemble decodes."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from toolkit.reference.prompts import PROMPTS

    tok = AutoTokenizer.from_pretrained(tiny / "target")
    model = AutoModelForCausalLM.from_pretrained(tiny / "target", dtype=torch.float32).eval()
    out = {}
    with torch.inference_mode():
        for prompt in PROMPTS:
            ids = tok(prompt)["input_ids"]
            seq = model.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=NEW_TOKENS)
            out[prompt] = tok.decode(seq[0, len(ids) :].tolist(), skip_special_tokens=True)
    return out


def _all_at(
    concurrency: int, url: str, prompts: list[str], extra: dict[str, Any] | None = None
) -> dict[str, str]:
    def one(prompt: str) -> str:
        # The completion only (the deployment's default keeps the prompt, as upstream's).
        body = {"text_input": prompt, "max_tokens": NEW_TOKENS, "exclude_input_in_output": True, **(extra or {})}
        return _post(url, body)["text_output"]

    with ThreadPoolExecutor(concurrency) as pool:
        return dict(zip(prompts, pool.map(one, prompts), strict=True))


def _check(got: dict[str, str], want: dict[str, str], what: str) -> None:
    wrong = [p for p in want if got[p] != want[p]]
    assert not wrong, (
        f"{what}: {len(wrong)} of {len(want)} differ, e.g. {wrong[0]!r}: {got[wrong[0]]!r} vs {want[wrong[0]]!r}"
    )


@pytest.mark.parametrize(
    ("mode", "spec"),
    [
        ("draft_target", {"mode": "draft_target", "max_draft_len": 4}),
        ("eagle3", {"mode": "eagle3", "max_draft_len": 3}),
        ("ngram", {"mode": "ngram", "max_draft_len": 4, "max_matching_ngram_size": 3}),
    ],
)
def test_batched_serving_is_lossless(tiny, tmp_path, hf_expected, mode, spec):  # noqa: F811
    # Draft-target is not decoupled (as upstream's example); the others stream.
    result, server = _serve(tmp_path, tiny, mode, spec, decoupled=mode != "draft_target")
    prompts = list(hf_expected)
    assert len(prompts) >= 20
    with serving(server):
        base = server.http_url
        # Draft-target: the BLS runs the loop, each iteration a new non-decoupled request of
        # tensorrt_llm; concurrent loops must share its forwards as on TensorRT-LLM's C++ backend,
        # which batches in flight across execute() calls. So the BLS goes first: the peak below
        # is its own (before the fix, one request per execute(): a peak of 1 at every level).
        entry = "tensorrt_llm_bls" if mode == "draft_target" else "ensemble"
        for c in CONCURRENCY:
            _check(_all_at(c, f"{base}/v2/models/{entry}/generate", prompts), hf_expected, f"{mode} c={c}")
            m = _settled(server.metrics_url)
            assert m["max"] == 8 and m["active"] == 0 and m["waiting"] == 0, m
            assert m["iteration_counter"] > 0, m
            # At c=1 no two requests overlap; at c=4 and 8 they share forwards (up to the limit 8).
            # A BLS loop's target requests alternate with its draft requests, so fewer overlap.
            low = 1 if mode == "draft_target" else c // 2
            assert (m["peak"] == 1) if c == 1 else (low < m["peak"] <= c), (c, m)
        if mode == "draft_target":
            # The ensemble is the target alone (the baseline).
            for c in CONCURRENCY:
                _check(
                    _all_at(c, f"{base}/v2/models/ensemble/generate", prompts),
                    hf_expected,
                    f"target-only c={c}",
                )
