"""Upstream's end_to_end_grpc_client.py with --return-log-probs, the penalty flags and
--num-return-sequences, through the twin's ensemble (tiny EAGLE-3, speculating), against
transformers.

TensorRT-LLM's defaults make that client's request greedy (temperature 1.0 but no top_k/top_p:
"the default setting is greedy search", tensorrtllm_backend issue #221), so transformers' greedy
`generate` is the yardstick; the deployment sets normalize_log_probs false, so output_log_probs
are log-softmaxed logits (with it true, upstream's default, greedy tokens get 0: tensorrtllm_backend
issue #276).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import upstream_clients as upstream
from hf_yardstick import hf_processors
from triton_support import live_deployment

from toolkit.reference.processors import Processors

pytestmark = [pytest.mark.tritonserver]

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "def read_lines(path):\n    with open(path) as f:\n        "
TOKENS = 16
PENALTIES = {"repetition_penalty": 1.3, "presence_penalty": 0.4, "frequency_penalty": 0.3}


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from toolkit.recipe import load_recipe

    recipe = load_recipe(
        str(ROOT / "recipes" / "tiny-eagle3.yaml"), ["name=knobs-eagle3", "serving.normalize_log_probs=false"]
    )
    with live_deployment(recipe, tmp_path_factory.mktemp("knobs")) as result:
        yield result


@pytest.fixture(scope="module")
def hf() -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = ROOT / "models" / "tiny" / "target"
    return AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.float32
    ).eval(), AutoTokenizer.from_pretrained(path)


def _greedy(hf: tuple[Any, Any], processors: Any = None) -> tuple[list[int], list[float], str]:
    """transformers: (generated ids up to the end id, their log-softmax, the client's text)."""
    model, tok = hf
    ids = tok(PROMPT)["input_ids"]
    with torch.inference_mode():
        out = model.generate(
            torch.tensor([ids]),
            do_sample=False,
            max_new_tokens=TOKENS,
            output_scores=True,
            return_dict_in_generate=True,
            logits_processor=processors,
        )
        scores = model.compute_transition_scores(out.sequences, out.scores, normalize_logits=True)[0]
    gen = out.sequences[0, len(ids) :].tolist()
    n = gen.index(tok.eos_token_id) if tok.eos_token_id in gen else len(gen)  # the end id is left out
    return gen[:n], scores[:n].tolist(), tok.decode(ids + gen[:n], skip_special_tokens=True)


def test_return_log_probs_as_upstreams_client_sends_it(deployment: Any, hf: tuple[Any, Any]) -> None:
    grpc = deployment.grpc_url.removeprefix("grpc://")
    gen, want, text_want = _greedy(hf)
    results: list[Any] = []
    text, _ = upstream.end_to_end(
        grpc, "ensemble", PROMPT, output_len=TOKENS, log_probs=True, results=results
    )
    assert text == text_want
    (result,) = results
    lp, cum = result.as_numpy("output_log_probs"), result.as_numpy("cum_log_probs")
    assert lp.shape == (1, 1, len(gen)) and cum.shape == (1, 1)  # [batch, beams, tokens], [batch, beams]
    assert np.allclose(lp[0, 0], want, atol=1e-4), (lp[0, 0].tolist(), want)
    assert abs(float(cum[0, 0]) - sum(want)) < 1e-3
    assert min(want) < -0.05  # the tokens were not all certain: the comparison has teeth
    # Streamed (--streaming): each chunk carries its tokens' log probs, cum_log_probs the total so far.
    chunks: list[Any] = []
    upstream.end_to_end(
        grpc, "ensemble", PROMPT, output_len=TOKENS, log_probs=True, streaming=True, results=chunks
    )
    streamed = np.concatenate([c.as_numpy("output_log_probs")[0, 0] for c in chunks])
    assert np.allclose(streamed, want, atol=1e-4)
    assert abs(float(chunks[-1].as_numpy("cum_log_probs")[0, 0]) - sum(want)) < 1e-3


def test_penalties_and_num_return_sequences_as_upstreams_client_sends_them(
    deployment: Any, hf: tuple[Any, Any]
) -> None:
    grpc = deployment.grpc_url.removeprefix("grpc://")
    model, tok = hf
    prompt_len = len(tok(PROMPT)["input_ids"])
    proc = Processors(**PENALTIES)
    gen, want, text_want = _greedy(hf, hf_processors(proc, prompt_len, tok.eos_token_id))
    assert text_want != _greedy(hf)[2], "the penalties change nothing: the test would prove nothing"
    results: list[Any] = []
    text, _ = upstream.end_to_end(
        grpc, "ensemble", PROMPT, output_len=TOKENS, log_probs=True, penalties=PENALTIES, results=results
    )
    assert text == text_want
    assert np.allclose(results[0].as_numpy("output_log_probs")[0, 0], want, atol=1e-4)
    # -n 2: one response per sequence, told apart by sequence_index (greedy here, so alike).
    results = []
    upstream.end_to_end(grpc, "ensemble", PROMPT, output_len=TOKENS, num_return_sequences=2, results=results)
    assert sorted(int(r.as_numpy("sequence_index")[0][0]) for r in results) == [0, 1]
    assert {r.as_numpy("text_output")[0].decode() for r in results} == {_greedy(hf)[2]}


def test_gate_scores_a_divergence_with_the_baseline_deployments_logits(
    deployment: Any, hf: tuple[Any, Any]
) -> None:
    """validate's correctness gate, given only a baseline URL: the log-probs at a divergence come
    from the deployment's generation_logits for that one position, equal to transformers'."""
    from toolkit.validate import _served_scorer, _tokenizer

    model, _ = hf
    tok = _tokenizer(None, deployment.http_url)  # the deployment's preprocessing tokenizer_dir
    assert tok is not None
    gen, _, _ = _greedy(hf)
    ids = tok(PROMPT)["input_ids"] + gen[:5]
    got = _served_scorer(deployment.http_url, "ensemble", tok, True)(ids)
    with torch.inference_mode():
        want = torch.log_softmax(model(torch.tensor([ids])).logits[0, -1], -1)
    assert got is not None and np.allclose(got, want.numpy(), atol=1e-4)
