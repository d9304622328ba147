"""Sampling through the served twin keeps the target's distribution: Pearson χ² of the first two
generated tokens, sampled through real Triton with tritonclient (one request per draw, each with
its own seed), against the target's exact distribution computed with transformers.

Two served paths: draft-target through its BLS entry (`tensorrt_llm_bls`, the draft and the
target as separate models, TensorRT-LLM's `draft_tokens_external` verification), and EAGLE-3, SA,
PARD and MTP through the `ensemble` (pre/postprocessing around the speculating `tensorrt_llm`). The draws are
compared as the client sees them, as text: the target's distribution of the text of its first two
tokens is Σ p(t1)·p(t2 | t1) over the token pairs that decode to that text (an end token ends the
text early, as the served model leaves it out), from one batched transformers forward over every
likely first token. The drafts must be accepted in a good share of the requests (the perf outputs
say how many), so that the second token often comes from an accepted draft's verification row.

Kept lean: the session-scoped deployments of tests/conftest.py `served` (shared with the stress,
bench and replay tests), 600 draws at 16 in flight per case (about 5 s each on 2 busy cores), at
temperature 1 and at 0.7 with top-p 0.9, each with a near miss the same draws must reject.
The in-process χ² tests of every mode, with both sampling settings and their mutation checks, are
tests/reference/test_chi2_modes.py.
"""

from __future__ import annotations

import queue
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tests.reference.test_sampling import chi2_pvalue
from toolkit.reference import SamplingParams
from toolkit.reference.sampling import probs

pytestmark = [pytest.mark.tritonserver, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
DRAWS = 600
IN_FLIGHT = 16
# Each setting with a near miss the same draws must reject (so that the test can tell one).
SETTINGS = {
    "t1": (SamplingParams(temperature=1.0), SamplingParams(temperature=0.8)),
    "t07_p09": (SamplingParams(temperature=0.7, top_p=0.9), SamplingParams(temperature=1.0, top_p=0.9)),
}
RECIPES = ("tiny-draft-target", "tiny-eagle3", "tiny-sa", "tiny-pard", "tiny-mtp")
# A prompt whose first drafts are often accepted (its last token recurs in it), and whose first two
# tokens still vary at temperature 1 (in-process: tests/reference/test_chi2_modes.py REPEATING).
PROMPT = "for i in range(10):\n    for j in range(10):\n        for k in range"


@pytest.fixture(scope="module")
def hf() -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = ROOT / "models" / "tiny" / "target"
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(path)


def target_text_distribution(hf: tuple[Any, Any], prompt: str, sp: SamplingParams) -> dict[str, float]:
    """The target's distribution of the text of its first two sampled tokens (the served model
    leaves an end token out of the text). Pairs below 1e-6 are left out: their mass (0.3% on
    PROMPT) goes to χ²'s pooled bucket."""
    model, tok = hf
    ids = tok(prompt)["input_ids"]
    eos = tok.eos_token_id
    with torch.inference_mode():
        p1 = probs(model(torch.tensor([ids])).logits[0, -1], sp).double()
        firsts = [t for t in torch.nonzero(p1 > 1e-6).flatten().tolist() if t != eos]
        dist: Counter[str] = Counter()
        if eos is not None:
            dist[""] += float(p1[eos])
        for start in range(0, len(firsts), 256):
            chunk = firsts[start : start + 256]
            logits = model(torch.tensor([ids + [t] for t in chunk])).logits[:, -1]
            for t1, row in zip(chunk, logits, strict=True):
                p2 = probs(row, sp).double() * p1[t1]
                for t2 in torch.nonzero(p2 > 1e-6).flatten().tolist():
                    pair = [t1] if t2 == eos else [t1, t2]
                    dist[tok.decode(pair, skip_special_tokens=True)] += float(p2[t2])
    return dict(dist)


def text_pvalue(observed: Counter[str], expected: dict[str, float], n: int) -> float:
    """chi2_pvalue over text bins: bins expected fewer than 5 times (and unseen texts) share one."""
    texts = sorted(expected, key=lambda s: -expected[s])
    index = {s: i for i, s in enumerate(texts)}
    p = torch.tensor([expected[s] for s in texts], dtype=torch.float64)
    counts: Counter[int] = Counter()
    for s, c in observed.items():
        counts[index.get(s, len(texts))] += c  # an unlisted text: a pooled bucket's draw
    return chi2_pvalue(counts, p, n)


def _inputs(names: set[str], prompt: str, seed: int, sp: SamplingParams, extra: dict[str, Any]) -> list[Any]:
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import np_to_triton_dtype

    # The seed under the name the entry's TensorRT-LLM version declares (random_seed up to 0.19).
    seed_name = "random_seed" if "random_seed" in names else "seed"
    values = {
        "text_input": np.array([[prompt]], dtype=object),
        "max_tokens": np.array([[2]], dtype=np.int32),
        "temperature": np.array([[sp.temperature]], dtype=np.float32),
        "top_p": np.array([[sp.top_p]], dtype=np.float32),  # TensorRT-LLM: no top_k/top_p is greedy
        seed_name: np.array([[seed]], dtype=np.uint64),
        "exclude_input_in_output": np.array([[True]], dtype=bool),
        "return_perf_metrics": np.array([[True]], dtype=bool),
        **extra,
    }
    out = []
    for name, value in values.items():
        t = grpcclient.InferInput(name, list(value.shape), np_to_triton_dtype(value.dtype))
        t.set_data_from_numpy(value)
        out.append(t)
    return out


def sample(result: Any, recipe: Any, prompt: str, sp: SamplingParams, n: int) -> tuple[Counter[str], int]:
    """n requests with seeds 0..n-1 through the deployment's entry over gRPC, IN_FLIGHT at a time:
    (texts, requests in which a draft token was accepted)."""
    import tritonclient.grpc as grpcclient

    url = result.grpc_url.removeprefix("grpc://")
    client = grpcclient.InferenceServerClient(url=url)
    names = {i.name for i in client.get_model_metadata(result.model).inputs}
    extra: dict[str, Any] = {}
    if "num_draft_tokens" in names:  # the BLS speculates only when asked (as validate asks it)
        extra["num_draft_tokens"] = np.array([[recipe.speculative.max_draft_len]], dtype=np.int32)
    outputs = [grpcclient.InferRequestedOutput(x) for x in ("text_output", "total_accepted_draft_tokens")]
    done: queue.Queue = queue.Queue()
    texts: Counter[str] = Counter()
    accepted = 0

    def put(result: Any, error: Any) -> None:  # tritonclient calls it with keywords
        done.put(error or result)

    def collect() -> None:
        nonlocal accepted
        r = done.get(timeout=60)
        if isinstance(r, Exception):
            raise r
        texts[r.as_numpy("text_output").reshape(-1)[0].decode()] += 1
        accepted += int(r.as_numpy("total_accepted_draft_tokens").reshape(-1)[0]) > 0

    decoupled = result.decoupled
    try:
        if decoupled:  # one response per request (stream false) over one gRPC stream
            client.start_stream(callback=put)
        for seed in range(n):
            if seed >= IN_FLIGHT:
                collect()
            inputs = _inputs(names, prompt, seed, sp, extra)
            if decoupled:
                client.async_stream_infer(result.model, inputs, outputs=outputs, request_id=str(seed))
            else:
                client.async_infer(result.model, inputs, put, outputs=outputs, request_id=str(seed))
        for _ in range(min(n, IN_FLIGHT)):
            collect()
    finally:
        if decoupled:
            client.stop_stream()
        client.close()
    return texts, accepted


@pytest.fixture(scope="module")
def distributions(hf: tuple[Any, Any]) -> Any:
    """The target's text distribution per sampling setting, computed once per module."""
    cache: dict[SamplingParams, dict[str, float]] = {}

    def get(sp: SamplingParams) -> dict[str, float]:
        if sp not in cache:
            cache[sp] = target_text_distribution(hf, PROMPT, sp)
        return cache[sp]

    return get


@pytest.mark.parametrize("setting", SETTINGS)
@pytest.mark.parametrize("served", RECIPES, indirect=True)
def test_served_sampling_keeps_the_target_distribution(served: Any, setting: str, distributions: Any) -> None:
    recipe, result = served
    sp, near_miss = SETTINGS[setting]
    assert result.entry_kind == ("bls" if recipe.mode == "draft_target" else "ensemble")
    texts, accepted = sample(result, recipe, PROMPT, sp, DRAWS)
    assert sum(texts.values()) == DRAWS
    assert accepted >= DRAWS // 10, f"drafts accepted in only {accepted} of {DRAWS} requests"
    expected = distributions(sp)
    assert sum(1 for v in expected.values() if v * DRAWS >= 5) >= 3, (
        "too few bins: the test would prove little"
    )
    p = text_pvalue(texts, expected, DRAWS)
    miss = text_pvalue(texts, distributions(near_miss), DRAWS)
    print(
        f"{recipe.display_name} ({result.entry_kind}) {setting}: χ² p = {p:.3g} (near miss {near_miss}: "
        f"{miss:.3g}), {len(texts)} texts, a draft accepted in {accepted}/{DRAWS} requests"
    )
    assert p > 1e-3, (
        f"{result.entry_kind}: served first-two-token distribution differs from the target's (p={p:.2g})"
    )
    assert miss < 1e-6, f"the draws do not tell {sp} from {near_miss} (p={miss:.2g}): the test has no teeth"
