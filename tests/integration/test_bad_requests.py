"""Requests to a live deployment are refused with a 4xx naming the input.

tiny-draft-target on the real embedded Triton (build.max_input_len 512, max_seq_len 1024) serves
both entry points: the BLS (draft-target loop) and the ensemble (the reference tensorrt_llm model),
both not decoupled, as the GPU path's draft-target repository: a streamed probe is refused either for
its bad input or for streaming ("Streaming is only supported if model is deployed using decoupled
mode", the C++ backend's words), whichever check comes first.
The probes of the issue are sent over raw HTTP to /generate and /generate_stream; a hypothesis fuzz
of request bodies follows, and then a good request must still return the target's greedy text
(plain transformers: an independent yardstick).
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from triton_support import live_deployment

from .test_deploy import TINY, greedy_reference

pytestmark = [pytest.mark.tritonserver, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "def fibonacci(n):"
MODELS = ("tensorrt_llm_bls", "ensemble")


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    from toolkit.recipe import load_recipe

    recipe = load_recipe(ROOT / "recipes" / "tiny-draft-target.yaml")
    assert (recipe.build.max_input_len, recipe.build.max_seq_len) == (512, 1024)
    with live_deployment(recipe, tmp_path_factory.mktemp("bad"), burst=False) as result:
        yield result.http_url


def prompt_of(n: int) -> str:
    """A text that the deployment's tokenizer turns into exactly `n` tokens."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(TINY / "target")
    ids = tok("def f(x):\n    return x + 1\n" * 200, add_special_tokens=False)["input_ids"]
    text = tok.decode(ids[:n])
    while len(tok(text)["input_ids"]) > n:  # the preprocessing model adds special tokens itself
        text = text[:-1]
    assert len(tok(text)["input_ids"]) == n
    return text


def post(base: str, model: str, body: dict, stream: bool) -> tuple[int, str]:
    """(HTTP status, error text): the body's `error`, or the first error event of a stream."""
    url = f"{base}/v2/models/{model}/generate" + ("_stream" if stream else "")
    r = httpx.post(url, json=body, timeout=120)
    if r.headers.get("content-type", "").startswith("application/json"):
        return r.status_code, str(r.json().get("error", ""))
    events = [json.loads(ln[5:]) for ln in r.text.splitlines() if ln.startswith("data:")]
    errors = [e["error"] for e in events if "error" in e]
    return r.status_code, errors[0] if errors else ""


def probes() -> list[tuple[str, dict, str]]:
    """(what, body, the words the refusal must contain): the issue's probes."""
    return [
        ("max_tokens 0", {"text_input": PROMPT, "max_tokens": 0}, "max_tokens"),
        ("max_tokens -1", {"text_input": PROMPT, "max_tokens": -1}, "max_tokens"),
        ("max_tokens 2^31", {"text_input": PROMPT, "max_tokens": 2**31}, "max_tokens"),
        ("601-token prompt", {"text_input": prompt_of(601), "max_tokens": 4}, "max_input_len"),
        ("prompt + max_tokens", {"text_input": PROMPT, "max_tokens": 1100}, "max_seq_len"),
    ]


# Missing required inputs: Triton names them (400) when the request has too few inputs; the BLS
# names them itself otherwise. (Triton 2.51's ensemble loses a composing step's missing-input
# error when the request carries enough other inputs: HTTP 200 without a response.)
MISSING = [
    ("text_input missing", {"max_tokens": 4}, "text_input"),
    ("max_tokens missing", {"text_input": PROMPT}, "max_tokens"),
]


@pytest.mark.parametrize("stream", [False, True], ids=["generate", "generate_stream"])
@pytest.mark.parametrize("model", MODELS)
def test_probes_are_refused_naming_the_input(base, model, stream):
    failures = []
    cases = [(w, {**b, "stream": stream}, n) for w, b, n in probes()] + MISSING
    if model == "tensorrt_llm_bls":  # the BLS sees the request even with other inputs present
        cases += [(w + " (+stream)", {**b, "stream": stream}, n) for w, b, n in MISSING]
    for what, body, words in cases:
        status, error = post(base, model, body, stream)
        # Over generate_stream the refusal is an error event; Triton answers the stream with the
        # first response's status (400), or a plain JSON 400 when it refuses the request itself.
        named = words in error or (body.get("stream") and "Streaming is only supported" in error)
        if status != 400 or not named:
            failures.append(f"{what}: HTTP {status} {error[:200]!r}")
    assert failures == []


def test_long_sequences_of_the_bls_loop_are_not_refused(base):
    """The loop resends prompt + output so far, beyond max_input_len: only the total is bounded."""
    body = {"text_input": prompt_of(510), "max_tokens": 8}
    out = httpx.post(f"{base}/v2/models/tensorrt_llm_bls/generate", json=body, timeout=300)
    assert out.status_code == 200, out.text[:300]
    plain = httpx.post(f"{base}/v2/models/ensemble/generate", json=body, timeout=300)
    assert plain.status_code == 200 and plain.json()["text_output"] == out.json()["text_output"]


def test_tritons_own_answers(base):
    """What Triton 2.51 answers before (or around) sdtk's models, as docs/runbooks/troubleshooting.md
    states it; a Triton that fixes either makes this fail, and the page should change with it."""
    for model in MODELS:  # the HTTP frontend's JSON parser: 500, no input named
        status, error = post(base, model, {"text_input": PROMPT, "max_tokens": "four"}, False)
        assert status == 500 and error.startswith("Unable to parse 'data'"), (model, status, error)
    # The ensemble loses its composing step's missing-input error when other inputs are present; this
    # (draft-target's) ensemble is not decoupled, so Triton reports the deadlock it ends in.
    lost = (
        400,
        "in ensemble 'ensemble', [request id: <id_unknown>] unexpected deadlock, at least one output is "
        "not set while no more ensemble steps can be made",
    )
    assert post(base, "ensemble", {"max_tokens": 4, "stream": False}, False) == lost
    assert post(base, "ensemble", {"max_tokens": 4, "stream": True}, True) == lost


@pytest.mark.parametrize("model", MODELS)
def test_sdtk_validate_bad_input_check(base, model):
    from toolkit.validate import ValidateOptions, validate_deployment

    report = validate_deployment(http_url=base, grpc_url=None, model=model,
                                 options=ValidateOptions(prompts=(PROMPT,), max_tokens=8), progress=None)  # fmt: skip
    check = {c.name: c for c in report.checks}["bad-input"]
    assert check.status == "passed", check.detail
    assert check.detail.count("→ 400") == 3


values = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=40),
    st.lists(st.integers(-3, 3), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)  # fmt: skip
fields = st.sampled_from(["text_input", "max_tokens", "stream", "num_draft_tokens", "temperature", "top_k",
                          "end_id", "pad_id", "beam_width", "return_perf_metrics", "bad_words", "stop_words"])  # fmt: skip


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(model=st.sampled_from(MODELS), stream=st.booleans(),
       body=st.dictionaries(fields, values, max_size=5), max_tokens=st.one_of(st.none(), st.integers(1, 6)))  # fmt: skip
def test_fuzz_request_bodies(base, model, stream, body, max_tokens):
    if max_tokens is not None:  # keep most generations short: the fuzz is about the refusals
        body = {**body, "max_tokens": max_tokens, "text_input": body.get("text_input", PROMPT)}
    status, error = post(base, model, body, stream)
    # Triton's own JSON parser answers a value of the wrong JSON type with a 500 before any model
    # runs (2.51: "Unable to parse ..."); every error from our models must be a 4xx.
    assert status < 500 or error.startswith(TRITON_PARSER), (body, status, error[:300])


TRITON_PARSER = ("Unable to parse", "failed to parse the request JSON")


def test_good_request_after_the_fuzz(base):
    want = greedy_reference(PROMPT, 16)
    for model in MODELS:
        body = {"text_input": PROMPT, "max_tokens": 16, "exclude_input_in_output": True}  # the completion only
        r = httpx.post(f"{base}/v2/models/{model}/generate", json=body, timeout=120)
        assert r.status_code == 200 and r.json()["text_output"] == want, (model, r.text[:300])
