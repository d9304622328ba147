"""sdtk's Triton Python models, in process, against the fake `triton_python_backend_utils`.

Unit-level: the BLS calls fake preprocessing/LLM/postprocessing models and the reference
tensorrt_llm model drives a fake runtime (a deterministic "LM": the next token is a function of
the sequence). test_triton_integration.py runs the same code in a real Triton.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

import numpy as np
import pytest

EOS = 1
VOCAB = 60


def next_token(seq: list[int]) -> int:
    """The fake target's greedy choice: deterministic, and now and then the end id."""
    last = seq[-2:] if len(seq) > 1 else [0, *seq]
    t = (last[-1] * 31 + last[-2] * 17 + len(seq) * 13) % VOCAB
    return EOS if t == 5 else max(t, 3)


def draft_token(seq: list[int]) -> int:
    """The fake draft: the target's choice, except at every third length."""
    return next_token(seq) if len(seq) % 3 else (next_token(seq) + 1) % VOCAB or 3


def greedy(prompt: list[int], n: int, end_id: int = EOS) -> list[int]:
    """What the target generates, TensorRT-LLM style: stops at the end id and leaves it out."""
    seq, out = list(prompt), []
    while len(out) < n:
        t = next_token(seq)
        if t == end_id:
            break
        seq.append(t)
        out.append(t)
    return out


def args(config: dict) -> dict:
    return {"model_config": json.dumps(config)}


def model_config(name: str, params: dict[str, str], decoupled: bool = False) -> dict:
    return {
        "name": name,
        "parameters": {k: {"string_value": v} for k, v in params.items()},
        "model_transaction_policy": {"decoupled": decoupled},
    }


# --------------------------------------------------------------------------- toolkit/serving/triton.py


def test_helpers(pb):
    from sdtk_serving import triton as st

    params = {"a": " 3 ", "b": "${b}", "c": "", "d": "True", "e": "maybe"}
    assert st.param_int(params, "a", 0) == 3
    assert st.param_str(params, "b") is None and st.param_int(params, "c", 7) == 7
    assert st.param_bool(params, "d", False) is True and st.param_bool(params, "missing", True) is True
    with pytest.raises(ValueError, match="e='maybe' is not a boolean"):
        st.param_bool(params, "e", False)
    assert st.word_lists(np.array([[5, 6, 7, 0], [2, 3, -1, -1]])) == [[5, 6], [7]]
    assert st.word_lists(np.empty((2, 0))) == []
    assert st.stop_at([1, 2, 3, 4, 5], [[3, 4]]) == 4
    assert st.stop_at([1, 2, 3, 4, 5], [[3, 4]], start=4) is None  # ended before the new tokens
    assert st.stop_at([1, 2, 3, 4, 5], [[9], [4, 5], [2]]) == 2
    stacked = st.stack_rows([np.array([[1, 2]]), np.array([[3]])], fill=-1)
    assert stacked.tolist() == [[1, 2], [3, -1]]
    inputs = {"x": np.array([[4], [5]]), "r": np.array([True, False]), "s": np.array([[b"hi"]], dtype=object)}
    assert st.scalar(inputs, "x", 0, 1) == 5 and st.scalar(inputs, "r", None) is True
    assert st.scalar(inputs, "s", "") == "hi" and st.scalar(inputs, "none", 9) == 9


# --------------------------------------------------------------------------- pre/postprocessing


@pytest.fixture
def pre(load_model, tokenizer):
    module = load_model("inflight_batcher_llm/preprocessing/1/model.py")
    return module, module.Preprocessor(tokenizer)


def test_preprocessing_tokenizes_and_pads(pre, tokenizer):
    _, p = pre
    texts = ["def fib(n):", "Hello world! The quick brown fox"]
    out = p(
        {
            "QUERY": np.array([[t.encode()] for t in texts], dtype=object),
            "REQUEST_OUTPUT_LEN": np.array([[8], [9]]),
        }
    )
    ids = [tokenizer.encode(t) for t in texts]
    assert ids[0][0] == tokenizer.bos_token_id
    assert out["REQUEST_INPUT_LEN"].tolist() == [[len(ids[0])], [len(ids[1])]]
    width = max(map(len, ids))
    assert out["INPUT_ID"].shape == (2, width) and out["INPUT_ID"].dtype == np.int32
    assert out["INPUT_ID"][0, : len(ids[0])].tolist() == ids[0]
    assert set(out["INPUT_ID"][0, len(ids[0]) :].tolist()) <= {tokenizer.pad_token_id}
    assert out["REQUEST_OUTPUT_LEN"].tolist() == [[8], [9]]
    assert out["OUT_END_ID"].tolist() == [[1], [1]] and out["OUT_PAD_ID"].tolist() == [[2], [2]]
    assert out["BAD_WORDS_IDS"].shape == (2, 2, 0) and out["EMBEDDING_BIAS"].shape == (2, 0)
    assert out["DECODER_INPUT_ID"].tolist() == [[2], [2]] and out["REQUEST_DECODER_INPUT_LEN"].tolist() == [
        [1],
        [1],
    ]
    assert "OUT_PROMPT_TABLE_EXTRA_IDS" not in out


def test_preprocessing_options(pre, tokenizer):
    module, _ = pre
    p = module.Preprocessor(tokenizer, add_special_tokens=False)
    out = p({
        "QUERY": np.array([[b"fox"]], dtype=object),
        "REQUEST_OUTPUT_LEN": np.array([[4]]),
        "STOP_WORDS_DICT": np.array([[b" world", b"", b"fox"]], dtype=object),
        "END_ID": np.array([[7]]),
        "PAD_ID": np.array([[9]]),
        "EMBEDDING_BIAS_WORDS": np.array([[b"fox"]], dtype=object),
        "EMBEDDING_BIAS_WEIGHTS": np.array([[2.5]], dtype=np.float32),
        "PROMPT_TABLE_EXTRA_ID": np.array([[3]], dtype=np.uint64),
    })  # fmt: skip
    assert out["INPUT_ID"][0].tolist() == tokenizer.encode("fox", add_special_tokens=False)
    words = [tokenizer.encode(w, add_special_tokens=False) for w in (" world", "fox")]
    from sdtk_serving import triton as st

    assert st.word_lists(out["STOP_WORDS_IDS"][0]) == words
    assert out["STOP_WORDS_IDS"].shape == (1, 2, len(words[0]) + len(words[1]))
    assert out["OUT_END_ID"].tolist() == [[7]] and out["OUT_PAD_ID"].tolist() == [[9]]
    fox = tokenizer.encode("fox", add_special_tokens=False)
    assert out["EMBEDDING_BIAS"].shape == (1, len(tokenizer))
    assert out["EMBEDDING_BIAS"][0, fox].tolist() == [2.5] * len(fox) and out[
        "EMBEDDING_BIAS"
    ].sum() == 2.5 * len(fox)
    assert out["OUT_PROMPT_TABLE_EXTRA_IDS"].shape == out["INPUT_ID"].shape


def test_preprocessing_model(load_model, pb, tokenizer, tokenizer_dir):
    module = load_model("inflight_batcher_llm/preprocessing/1/model.py")
    model = module.TritonPythonModel()
    model.initialize(
        args(
            model_config(
                "preprocessing", {"tokenizer_dir": str(tokenizer_dir), "add_special_tokens": "false"}
            )
        )
    )
    good = pb.Request(
        {"QUERY": np.array([[b"hello"]], dtype=object), "REQUEST_OUTPUT_LEN": np.array([[3]], np.int32)}
    )
    empty = pb.Request(
        {"QUERY": np.array([[b""]], dtype=object), "REQUEST_OUTPUT_LEN": np.array([[3]], np.int32)}
    )
    image = pb.Request({**good.inputs, "IMAGE_URL": np.array([[b"http://x"]], dtype=object)})
    wrapped = pb.Request({**good.inputs, "REQUEST_OUTPUT_LEN": np.array([[-(2**31)]], np.int32)})
    responses = model.execute([good, empty, image, wrapped])
    assert len(responses) == 4
    assert "max_tokens (REQUEST_OUTPUT_LEN) must be between 1 and 2147483647, got -2147483648 (a value " \
        "beyond int32 wraps around)" in responses[3].error().message()  # fmt: skip
    assert not responses[0].has_error() and responses[0].as_dict()["REQUEST_INPUT_LEN"].tolist() == [
        [len(tokenizer.encode("hello", add_special_tokens=False))]
    ]
    assert "QUERY row 0 is empty" in responses[1].error().message()
    assert "multimodal" in responses[2].error().message()
    # Refusals of the request are INVALID_ARG, which Triton's HTTP frontend answers with 400.
    assert [r.error().code() for r in responses[1:]] == [pb.TritonError.INVALID_ARG] * 3
    with pytest.raises(ValueError, match="tokenizer_dir is empty"):
        module.TritonPythonModel().initialize(
            args(model_config("preprocessing", {"tokenizer_dir": "${tokenizer_dir}"}))
        )


def test_postprocessing(load_model, pb, tokenizer, tokenizer_dir):
    """OUTPUT is flat, one entry per beam, rows first: upstream's `np.array(req_outputs)`
    (tensorrtllm_backend v0.19.0 all_models/inflight_batcher_llm/postprocessing/1/model.py), which
    its clients read as `output[0].decode()` (inflight_batcher_llm/client/end_to_end_grpc_client.py,
    e2e_grpc_speculative_decoding_client.py)."""
    module = load_model("inflight_batcher_llm/postprocessing/1/model.py")
    ids = tokenizer.encode("Hello world!")
    tokens = np.array([[ids + [0, 0], ids[1:] + [0, 0, 0]]], dtype=np.int32)  # [1, 2 beams, L]
    out = module.Postprocessor(tokenizer)(tokens, np.array([[len(ids), len(ids) - 1]]))
    assert out.shape == (2,) and out[0] == b"Hello world!" and out[1] == b"Hello world!"
    keep = module.Postprocessor(tokenizer, skip_special_tokens=False)(
        np.array([ids], np.int32), np.array([len(ids)])
    )
    assert keep.shape == (1,) and keep[0] == b"<s>Hello world!"
    two_rows = module.Postprocessor(tokenizer)(
        np.concatenate([tokens, tokens]), np.array([[len(ids), 1]] * 2)
    )
    assert two_rows.shape == (4,) and two_rows[2] == b"Hello world!"
    model = module.TritonPythonModel()
    model.initialize(
        args(
            model_config(
                "postprocessing", {"tokenizer_dir": str(tokenizer_dir), "skip_special_tokens": "True"}
            )
        )
    )
    (response,) = model.execute(
        [pb.Request({"TOKENS_BATCH": tokens[:, :1], "SEQUENCE_LENGTH": np.array([[len(ids)]])})]
    )
    assert response.as_dict()["OUTPUT"].tolist() == [b"Hello world!"]


# --------------------------------------------------------------------------- fake models for the BLS


def fake_preprocessing(inputs, requested, decoupled):
    """Text → ids: one id per character (3 + ord % 50), BOS first; words list for stop words."""
    text = inputs["QUERY"].reshape(-1)[0].decode()
    ids = [0] + [3 + ord(c) % 50 for c in text]
    out = {
        "INPUT_ID": np.array([ids], np.int32),
        "REQUEST_INPUT_LEN": np.array([[len(ids)]], np.int32),
        "REQUEST_OUTPUT_LEN": inputs["REQUEST_OUTPUT_LEN"].reshape(1, 1),
        "OUT_END_ID": inputs.get("END_ID", np.array([[EOS]])).reshape(1, 1).astype(np.int32),
        "OUT_PAD_ID": np.array([[2]], np.int32),
        "BAD_WORDS_IDS": np.empty((1, 2, 0), np.int32),
        "EMBEDDING_BIAS": np.empty((1, 0), np.float32),
        "DECODER_INPUT_ID": np.array([[2]], np.int32),
        "REQUEST_DECODER_INPUT_LEN": np.array([[1]], np.int32),
    }
    stops = inputs.get("STOP_WORDS_DICT")
    if stops is not None:  # words given as space-separated ids
        seqs = [[int(x) for x in w.decode().split()] for w in stops.reshape(-1)]
        flat = [t for s in seqs for t in s]
        ends = [int(e) for e in np.cumsum([len(s) for s in seqs])]
        out["STOP_WORDS_IDS"] = np.array([[flat, ends + [-1] * (len(flat) - len(ends))]], np.int32)
    else:
        out["STOP_WORDS_IDS"] = np.empty((1, 2, 0), np.int32)
    return [out]


def fake_postprocessing(inputs, requested, decoupled):
    n = int(inputs["SEQUENCE_LENGTH"].reshape(-1)[0])
    text = " ".join(str(t) for t in inputs["TOKENS_BATCH"].reshape(-1)[:n])
    return [{"OUTPUT": np.array([[text.encode()]], dtype=object)}]


def llm(choose, name):
    """A fake C++ tensorrt_llm: draft_input_ids, request_output_len, end id, exclude, streaming."""

    def run(inputs, requested, decoupled):
        seq = inputs["input_ids"].reshape(-1).tolist()
        n = int(inputs["request_output_len"].reshape(-1)[0])
        end_id = int(inputs.get("end_id", np.array([EOS])).reshape(-1)[0])
        stream = bool(inputs.get("streaming", np.array([False])).reshape(-1)[0])
        if stream and not decoupled:
            raise ValueError("Streaming is only supported if model is deployed using decoupled mode.")
        draft = inputs["draft_input_ids"].reshape(-1).tolist() if "draft_input_ids" in inputs else []
        accepted, new = 0, []
        for d in draft:
            if choose(seq + new) != d:
                break
            new.append(d)
            accepted += 1
        while len(new) < n:
            t = choose(seq + new)
            if t == end_id:
                break
            new.append(t)
        exclude = bool(inputs.get("exclude_input_in_output", np.array([False])).reshape(-1)[0])
        perf = bool(inputs.get("return_perf_metrics", np.array([False])).reshape(-1)[0])

        def out(tokens):
            o = {
                "output_ids": np.array([[tokens]], np.int32).reshape(1, 1, -1),
                "sequence_length": np.array([[len(tokens)]], np.int32),
            }
            if perf:
                o["total_accepted_draft_tokens"] = np.array([[accepted]], np.int32)
                o["total_draft_tokens"] = np.array([[len(draft)]], np.int32)
                o["acceptance_rate"] = np.array([[accepted / len(draft) if draft else 0.0]], np.float32)
            return o

        if stream:
            return [out(new[i : i + 2]) for i in range(0, len(new), 2)] or [out([])]
        return [out(new if exclude else seq + new)]

    run.__name__ = name
    return run


@pytest.fixture
def bls_module(load_model, pb):
    pb.MODELS.update(
        preprocessing=fake_preprocessing,
        postprocessing=fake_postprocessing,
        tensorrt_llm=llm(next_token, "target"),
        tensorrt_llm_draft=llm(draft_token, "draft"),
    )
    return load_model("inflight_batcher_llm/tensorrt_llm_bls/1/model.py")


def make_bls(module, **kw):
    defaults = dict(
        decoupled=False, target="tensorrt_llm", draft="tensorrt_llm_draft", exclude_input_in_output=True
    )
    return module.Bls(module.triton_call, **{**defaults, **kw})


def request(text="abc", max_tokens=12, **extra) -> dict[str, np.ndarray]:
    out = {
        "text_input": np.array([[text.encode()]], dtype=object),
        "max_tokens": np.array([[max_tokens]], np.int32),
    }
    for k, v in extra.items():
        dtype = {bool: np.bool_, int: np.int32, float: np.float32}[type(v)]
        out[k] = np.array([[v]], dtype=dtype)
    return out


def ids_of(text_output: np.ndarray) -> list[int]:
    return [int(t) for t in text_output.reshape(-1)[0].decode().split()]


def prompt_of(text: str) -> list[int]:
    return [0] + [3 + ord(c) % 50 for c in text]


@pytest.mark.parametrize("max_tokens", [1, 2, 7, 12, 40])
@pytest.mark.parametrize("num_draft", [1, 3, 5])
def test_bls_draft_target_loop_is_lossless_and_counts_the_whole_request(
    bls_module, pb, max_tokens, num_draft
):
    bls = make_bls(bls_module)
    want = greedy(prompt_of("abc"), max_tokens)
    (plain,) = list(bls(request(max_tokens=max_tokens, num_draft_tokens=0)))
    assert ids_of(plain["text_output"]) == want
    pb.CALLS.clear()
    (spec,) = list(bls(request(max_tokens=max_tokens, num_draft_tokens=num_draft, return_perf_metrics=True)))
    assert ids_of(spec["text_output"]) == want
    drafts = [c for c in pb.CALLS if c[0] == "tensorrt_llm_draft"]
    targets = [c for c in pb.CALLS if c[0] == "tensorrt_llm"]
    assert all(1 <= int(c[1]["request_output_len"][0, 0]) <= num_draft for c in drafts)
    drafted = sum(c[1]["draft_input_ids"].size for c in targets if "draft_input_ids" in c[1])
    for _, t in targets:
        k = t["draft_input_ids"].size if "draft_input_ids" in t else 0
        assert int(t["request_output_len"][0, 0]) == k + 1
    accepted = sum(_accepted(c) for _, c in targets if "draft_input_ids" in c)
    assert int(spec["total_draft_tokens"][0, 0]) == drafted
    assert int(spec["total_accepted_draft_tokens"][0, 0]) == accepted
    assert spec["acceptance_rate"][0, 0] == pytest.approx(accepted / drafted if drafted else 0.0)
    assert spec["first_token_time_ns"][0, 0] >= spec["arrival_time_ns"][0, 0]
    assert spec["last_token_time_ns"][0, 0] >= spec["first_token_time_ns"][0, 0]


@pytest.mark.parametrize("name", ["seed", "random_seed"])
def test_bls_passes_the_seed_to_every_draft_call(bls_module, pb, name):
    """The draft samples with the request's seed under the name tensorrt_llm declares at the
    deployment's version: `random_seed` up to TensorRT-LLM 0.19 (tensorrtllm_backend v0.19.0
    inflight_batcher_llm/src/utils.h reads `random_seed`), `seed` from 0.20 (14c3afe)."""
    bls = make_bls(bls_module)
    pb.CALLS.clear()
    list(bls(request(max_tokens=8, num_draft_tokens=2, **{name: 7})))
    drafts = [c[1] for c in pb.CALLS if c[0] == "tensorrt_llm_draft"]
    targets = [c[1] for c in pb.CALLS if c[0] == "tensorrt_llm"]
    assert drafts and targets
    assert all(int(d[name].reshape(-1)[0]) == 7 for d in drafts), [sorted(d) for d in drafts]
    assert all(int(t[name].reshape(-1)[0]) == 7 for t in targets)


def _accepted(call_inputs) -> int:
    """How many of a target call's draft tokens the fake target's greedy choice agrees with."""
    draft = call_inputs["draft_input_ids"].reshape(-1).tolist()
    want = greedy(call_inputs["input_ids"].reshape(-1).tolist(), len(draft))
    n = 0
    while n < min(len(draft), len(want)) and draft[n] == want[n]:
        n += 1
    return n


def test_bls_default_num_draft_tokens_and_exclude(bls_module, pb):
    bls = make_bls(bls_module, default_num_draft_tokens=4, exclude_input_in_output=False)
    (out,) = list(bls(request(max_tokens=6, return_perf_metrics=True)))
    assert ids_of(out["text_output"]) == prompt_of("abc") + greedy(prompt_of("abc"), 6)
    assert int(out["total_draft_tokens"][0, 0]) > 0
    (ex,) = list(bls(request(max_tokens=6, exclude_input_in_output=True)))
    assert ids_of(ex["text_output"]) == greedy(prompt_of("abc"), 6)
    assert "total_draft_tokens" not in ex  # only with return_perf_metrics


def test_bls_stop_words_in_the_loop(bls_module):
    want = greedy(prompt_of("abc"), 30)
    stop = want[6:8]
    bls = make_bls(bls_module)
    stops = np.array([[" ".join(map(str, stop)).encode()]], dtype=object)
    (out,) = list(bls({**request(max_tokens=30, num_draft_tokens=3), "stop_words": stops}))
    end = next(e for e in range(2, len(want) + 1) if want[e - 2 : e] == stop)  # the first match
    assert ids_of(out["text_output"]) == want[:end]


def test_bls_end_id_stops_the_loop(bls_module):
    text = next(t for t in (f"prompt {i}" for i in range(100)) if len(greedy(prompt_of(t), 200)) < 200)
    full = greedy(prompt_of(text), 200)
    bls = make_bls(bls_module)
    (out,) = list(bls(request(text, max_tokens=200, num_draft_tokens=4)))
    assert ids_of(out["text_output"]) == full


def test_bls_survives_a_draft_that_ends_at_once(bls_module, pb):
    """A draft model whose first token is its end id answers [1, 1, 0] ids (SmolLM2's 2-layer
    draft did, served): the loop proposes nothing that step and the target goes on alone."""
    pb.MODELS["tensorrt_llm_draft"] = llm(lambda seq: EOS if len(seq) > 6 else draft_token(seq), "draft")
    bls = make_bls(bls_module)
    (out,) = list(bls(request(max_tokens=20, num_draft_tokens=3)))
    assert ids_of(out["text_output"]) == greedy(prompt_of("abc"), 20)


def test_bls_streams_the_loop_when_decoupled(bls_module):
    bls = make_bls(bls_module, decoupled=True)
    chunks = list(bls(request(max_tokens=15, num_draft_tokens=3, stream=True, return_perf_metrics=True)))
    assert len(chunks) > 1
    assert [t for c in chunks for t in ids_of(c["text_output"])] == greedy(prompt_of("abc"), 15)
    (whole,) = list(bls(request(max_tokens=15, num_draft_tokens=3, return_perf_metrics=True)))
    assert int(chunks[-1]["total_draft_tokens"][0, 0]) == int(whole["total_draft_tokens"][0, 0])
    assert int(chunks[0]["total_draft_tokens"][0, 0]) < int(chunks[-1]["total_draft_tokens"][0, 0])
    acc = make_bls(bls_module, decoupled=True, accumulate_tokens=True)
    chunks = list(acc(request(max_tokens=15, num_draft_tokens=3, stream=True, return_num_output_tokens=True)))
    assert ids_of(chunks[-1]["text_output"]) == greedy(prompt_of("abc"), 15)
    # num_output_tokens counts each chunk's new tokens, even when the text accumulates.
    counts = [int(c["num_output_tokens"][0, 0]) for c in chunks]
    assert sum(counts) == 15 and len(counts) == len(chunks) > 1 and all(n > 0 for n in counts)


def test_bls_plain_streaming(bls_module):
    bls = make_bls(bls_module, decoupled=True)
    chunks = list(bls(request(max_tokens=7, stream=True, num_draft_tokens=0)))
    assert [len(ids_of(c["text_output"])) for c in chunks] == [2, 2, 2, 1]
    acc = make_bls(bls_module, decoupled=True, accumulate_tokens=True)
    chunks = list(acc(request(max_tokens=7, stream=True, num_draft_tokens=0)))
    assert [len(ids_of(c["text_output"])) for c in chunks] == [2, 4, 6, 7]


def test_bls_detokenizes_an_empty_closing_chunk(bls_module):
    """The reference LLM closes a perf-metrics stream with an empty chunk ([1, 1, 0] ids)."""
    bls = make_bls(bls_module, decoupled=True)
    text = bls._detokenize(np.zeros((1, 1, 0), np.int32), np.zeros((1, 1), np.int32))
    assert text.shape == (1,) and text[0] == b""  # [beams], as postprocessing's OUTPUT


def test_bls_plain_returns_every_beam(bls_module, pb):
    def two_beams(inputs, requested, decoupled):
        return [
            {
                "output_ids": np.array([[[7, 8, 9], [7, 4, 0]]], np.int32),
                "sequence_length": np.array([[3, 2]], np.int32),
            }
        ]

    def post(inputs, requested, decoupled):
        tokens, lengths = inputs["TOKENS_BATCH"], inputs["SEQUENCE_LENGTH"]
        beams = [" ".join(map(str, tokens[0, k, : lengths[0, k]])).encode() for k in range(tokens.shape[1])]
        return [{"OUTPUT": np.array(beams, dtype=object)}]  # upstream's flat [beams]

    pb.MODELS.update(tensorrt_llm=two_beams, postprocessing=post)
    (out,) = list(make_bls(bls_module)(request(beam_width=2, num_draft_tokens=0)))
    assert out["text_output"].tolist() == [b"7 8 9", b"7 4"]


def test_bls_batch_of_rows(bls_module):
    bls = make_bls(bls_module)
    batch = {
        "text_input": np.array([[b"abc"], [b"hello"]], dtype=object),
        "max_tokens": np.array([[5], [3]], np.int32),
        "num_draft_tokens": np.array([[2], [2]], np.int32),
    }
    (out,) = list(bls(batch))
    assert out["text_output"].shape == (2,)  # upstream's postprocessing: every row's beams, flat
    assert ids_of(out["text_output"][0:1]) == greedy(prompt_of("abc"), 5)
    assert ids_of(out["text_output"][1:2]) == greedy(prompt_of("hello"), 3)


@pytest.mark.parametrize(
    ("kw", "extra", "message"),
    [
        ({"draft": None}, {"num_draft_tokens": 2}, "without draft model"),
        ({}, {"stream": True}, "decoupled mode"),
        (
            {},
            {"num_draft_tokens": 2, "return_generation_logits": True},
            "generation logits are not supported",
        ),
        ({}, {"num_draft_tokens": 2, "beam_width": 2}, "beam search"),
        ({}, {"num_draft_tokens": -1}, "must be >= 0"),
        ({}, {"max_tokens": 0}, "max_tokens must be between 1 and 2147483647, got 0"),
        ({}, {"max_tokens": -(2**31)}, "wraps around"),
    ],
)
def test_bls_refusals(bls_module, kw, extra, message):
    with pytest.raises(ValueError, match=message):
        list(make_bls(bls_module, **kw)(request(**extra)))


def test_bls_checks_the_prompt_against_the_engine_limits_before_its_loop(bls_module):
    bls = make_bls(bls_module, max_input_len=4, max_seq_len=20)
    n = len(prompt_of("abcd"))
    with pytest.raises(ValueError, match=f"text_input is {n} tokens, over the engine's max_input_len 4"):
        list(bls(request("abcd", max_tokens=4, num_draft_tokens=2)))
    m = len(prompt_of("abc"))
    with pytest.raises(
        ValueError, match=rf"\+ max_tokens \(19\) = {m + 19} is over the engine's max_seq_len 20"
    ):
        list(bls(request("abc", max_tokens=19, num_draft_tokens=2)))
    # Within the limits the loop runs on past max_input_len: each iteration resends the sequence.
    (out,) = list(bls(request("abc", max_tokens=20 - m, num_draft_tokens=2)))
    assert ids_of(out["text_output"]) == greedy(prompt_of("abc"), 20 - m)


def test_bls_model_execute(bls_module, pb):
    model = bls_module.TritonPythonModel()
    params = {"tensorrt_llm_model_name": "tensorrt_llm", "tensorrt_llm_draft_model_name": "tensorrt_llm_draft",
              "accumulate_tokens": "False", "default_num_draft_tokens": "3", "default_use_draft_logits": "False",
              "exclude_input_in_output": "True", "multimodal_encoders_name": ""}  # fmt: skip
    model.initialize(args(model_config("tensorrt_llm_bls", params, decoupled=False)))
    good, bad = pb.Request(request(max_tokens=4)), pb.Request(request(stream=True))
    responses = model.execute([good, bad])
    assert len(responses) == 2
    assert ids_of(responses[0].as_dict()["text_output"]) == greedy(prompt_of("abc"), 4)
    assert "tensorrt_llm_bls: Streaming is only supported" in responses[1].error().message()
    assert responses[1].error().code() == pb.TritonError.INVALID_ARG

    model = bls_module.TritonPythonModel()
    model.initialize(args(model_config("tensorrt_llm_bls", params, decoupled=True)))
    one, stream, broken = (pb.Request(request(max_tokens=4)), pb.Request(request(max_tokens=9, stream=True)),
                           pb.Request({"text_input": np.array([[b"x"]], dtype=object)}))  # fmt: skip
    assert model.execute([one, stream, broken]) is None
    final = pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL
    (resp, flags), (last, last_flags) = one.sender.sent
    assert (flags, last, last_flags) == (0, None, final) and not resp.has_error()
    assert [f for _, f in stream.sender.sent][-1] == final and stream.sender.sent[-1][0] is None
    assert len(stream.sender.sent) > 2 and not any(f for _, f in stream.sender.sent[:-1])
    ((err, flags),) = broken.sender.sent
    assert (
        flags == pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        and "max_tokens are required" in err.error().message()
        and err.error().code() == pb.TritonError.INVALID_ARG
    )


# --------------------------------------------------------------------------- reference tensorrt_llm


class FakeRuntime:
    """The ReferenceRuntime API (docs/contracts.md) over the fake LM."""

    eos_token_id = EOS

    def __init__(self, choose=next_token):
        self.choose = choose
        self.calls = []

    def generate(
        self,
        prompt_ids,
        max_new_tokens,
        *,
        sampling=None,
        spec=None,
        end_id=None,
        on_tokens=None,
        processors=None,
        trace=None,
    ):
        from toolkit.reference import SpecStats

        # Whether the call speculates: the runtime's own section (None) or a given one, not PLAIN's.
        speculative = spec is None or spec.mode != "none"
        self.calls.append(("generate", list(prompt_ids), max_new_tokens, speculative, spec))
        seq, out, stats = list(prompt_ids), [], SpecStats()
        eos = self.eos_token_id if end_id is None else (None if end_id < 0 else end_id)
        while len(out) < max_new_tokens:
            step = []
            for _ in range(min(2, max_new_tokens - len(out))):
                t = self.choose(seq)
                seq.append(t)
                step.append(t)
                if t == eos:
                    break
            stats.record([1] if speculative else [], len(step))
            out += step
            if on_tokens:
                on_tokens(step)
            if eos in step:
                break
        return type("R", (), {"token_ids": out, "stats": stats, "finish_reason": "length"})()

    def verify_draft(self, input_ids, draft_ids, *, sampling=None, end_id=None, processors=None, trace=None):
        self.calls.append(("verify", list(input_ids), list(draft_ids)))
        seq, new = list(input_ids), []
        for d in draft_ids:
            if self.choose(seq + new) != d:
                break
            new.append(d)
        new.append(self.choose(seq + new))
        eos = self.eos_token_id if end_id is None else end_id
        if eos in new:
            new = new[: new.index(eos) + 1]
        return type("V", (), {"new_tokens": new, "accepted": len(new) - 1, "drafted": len(draft_ids)})()

    def enable_batching(self, max_batch_size, capacity):
        self.batching = (max_batch_size, capacity)

    @contextlib.contextmanager
    def hold(self, prefix):
        self.calls.append(("hold", list(prefix)))
        yield


@pytest.fixture
def ref_module(load_model, pb):
    pytest.importorskip("torch")
    return load_model("reference/tensorrt_llm/1/model.py")


def llm_request(prompt, n, **extra) -> dict[str, np.ndarray]:
    out = {
        "input_ids": np.array([prompt], np.int32),
        "input_lengths": np.array([len(prompt)], np.int32),
        "request_output_len": np.array([n], np.int32),
    }
    for k, v in extra.items():
        out[k] = np.asarray(v) if isinstance(v, (list, np.ndarray)) else np.array([v])
    return out


def toks(out) -> list[int]:
    return out["output_ids"].reshape(-1)[: int(out["sequence_length"].reshape(-1)[0])].tolist()


def test_reference_generation(ref_module):
    gen = ref_module.Generator(FakeRuntime(), None, exclude_input_in_output=False, decoupled=False)
    prompt = next(p for p in (prompt_of(f"prompt {i}") for i in range(100)) if len(greedy(p, 200)) < 200)
    full = greedy(prompt, 200)
    (out,) = list(gen(llm_request(prompt, 200, return_perf_metrics=True, return_num_output_tokens=True)))
    assert toks(out) == prompt + full  # the end id is left out, the prompt kept
    assert out["output_ids"].shape == (1, 1, len(prompt) + len(full))
    assert int(out["num_output_tokens"][0, 0]) == len(full)
    (ex,) = list(gen(llm_request(prompt, 5, exclude_input_in_output=True)))
    assert toks(ex) == full[:5] and "acceptance_rate" not in ex
    (none,) = list(gen(llm_request(prompt, 5, end_id=-1)))
    assert len(toks(none)) == len(prompt) + 5


def test_reference_stop_words_and_stream(ref_module):
    prompt = prompt_of("abc")
    want = greedy(prompt, 20)
    stop = np.array([[want[4:6], [2, -1]]], np.int32)  # one stop word of two tokens
    gen = ref_module.Generator(FakeRuntime(), None, exclude_input_in_output=True, decoupled=True)
    (out,) = list(gen(llm_request(prompt, 20, stop_words_list=stop)))
    assert toks(out) == want[:6]
    chunks = list(gen(llm_request(prompt, 9, streaming=True, return_perf_metrics=True)))
    assert [t for c in chunks for t in toks(c)] == want[:9]
    # Without speculation the model decodes through verify_draft (reusing the previous request's
    # cache): one token per step, sent as they come, then the totals.
    assert [len(toks(c)) for c in chunks] == [1] * 9 + [0]
    assert ["acceptance_rate" in c for c in chunks] == [False] * 9 + [True]
    quiet = list(gen(llm_request(prompt, 3, streaming=True)))
    assert [len(toks(c)) for c in quiet] == [1, 1, 1]
    # num_output_tokens is per response: each chunk counts its own tokens, the closing one 0.
    counted = list(gen(llm_request(prompt, 9, streaming=True, return_num_output_tokens=True)))
    assert [int(c["num_output_tokens"][0, 0]) for c in counted] == [len(toks(c)) for c in counted]
    assert sum(int(c["num_output_tokens"][0, 0]) for c in counted) == 9


def test_reference_draft_input_ids_follow_trtllm(ref_module):
    rt = FakeRuntime()
    gen = ref_module.Generator(rt, None, exclude_input_in_output=True, decoupled=False)
    prompt = prompt_of("abc")
    want = greedy(prompt, 6)
    draft = [want[0], want[1], (want[2] + 1) % VOCAB or 3, 9]
    (out,) = list(gen(llm_request(prompt, len(draft) + 1, draft_input_ids=[draft], return_perf_metrics=True)))
    assert toks(out) == want[:5]  # accepted 2 + bonus, then plain steps up to request_output_len
    assert int(out["total_draft_tokens"][0, 0]) == 4 and int(out["total_accepted_draft_tokens"][0, 0]) == 2
    # Plain steps extend the cache, all in one batch membership.
    assert [c[0] for c in rt.calls] == ["hold", "verify", "verify", "verify"]


def test_reference_per_request_lookahead(ref_module):
    from toolkit.recipe import Lookahead

    rt = FakeRuntime()
    spec = Lookahead(mode="lookahead", window=4, ngram=3, verification_set=4)
    gen = ref_module.Generator(rt, spec, exclude_input_in_output=True, decoupled=False)
    prompt = prompt_of("abc")
    list(gen(llm_request(prompt, 4)))
    assert rt.calls[-1][3] is True and rt.calls[-1][4] is spec
    list(
        gen(
            llm_request(
                prompt, 4, lookahead_window_size=1, lookahead_ngram_size=1, lookahead_verification_set_size=0
            )
        )
    )
    assert rt.calls[-1][3] is False
    list(
        gen(
            llm_request(
                prompt, 4, lookahead_window_size=2, lookahead_ngram_size=2, lookahead_verification_set_size=1
            )
        )
    )
    assert (rt.calls[-1][4].window, rt.calls[-1][4].ngram, rt.calls[-1][4].verification_set) == (2, 2, 1)
    with pytest.raises(ValueError, match="exceeds"):
        list(
            gen(
                llm_request(
                    prompt,
                    4,
                    lookahead_window_size=9,
                    lookahead_ngram_size=2,
                    lookahead_verification_set_size=1,
                )
            )
        )
    plain = ref_module.Generator(rt, None, exclude_input_in_output=True, decoupled=False)
    with pytest.raises(ValueError, match="decoding_mode lookahead"):
        list(
            plain(
                llm_request(
                    prompt,
                    4,
                    lookahead_window_size=1,
                    lookahead_ngram_size=1,
                    lookahead_verification_set_size=0,
                )
            )
        )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"streaming": True}, "decoupled mode"),
        ({"beam_width": 2}, "beam_width other than 1"),
        ({"return_context_logits": True}, "return_context_logits"),
        ({"embedding_bias": np.ones((1, 4), np.float32)}, "embedding_bias"),
        ({"num_return_sequences": 2}, "needs a decoupled deployment"),
        ({"lora_task_id": 3}, "lora_task_id"),
    ],
)
def test_reference_refusals(ref_module, extra, message):
    gen = ref_module.Generator(FakeRuntime(), None, exclude_input_in_output=True, decoupled=False)
    with pytest.raises(ValueError, match=message):
        list(gen(llm_request([0, 5], 3, **extra)))


@pytest.mark.parametrize(
    ("prompt_len", "max_new", "message"),
    [
        (2, 0, r"request_output_len \(max_tokens\) must be between 1 and 2147483647, got 0"),
        (2, -(2**31), "wraps around"),
        (9, 1, "input_lengths .* is 9, over the engine's max_input_len 8"),
        (
            8,
            9,
            "input_lengths 8 \\+ request_output_len \\(max_tokens\\) 9 = 17 is over the engine's max_seq_len 16",
        ),
    ],
)
def test_reference_refuses_lengths_beyond_the_engine(ref_module, prompt_len, max_new, message):
    gen = ref_module.Generator(
        FakeRuntime(), None, exclude_input_in_output=True, decoupled=False, max_input_len=8, max_seq_len=16
    )
    with pytest.raises(ValueError, match=message):
        list(gen(llm_request(list(range(prompt_len)), max_new)))
    (ok,) = list(gen(llm_request(list(range(8)), 8)))  # exactly at both limits
    assert len(toks(ok)) >= 8


def test_reference_bounds_only_the_total_of_a_bls_loop_request(ref_module, pb):
    """A draft-target deployment's ensemble reaches the same model as the BLS loop: a client's
    prompt is still held to max_input_len; the loop's sub-requests (marked with a request
    parameter by the BLS, which checked the prompt) resend the sequence so far and only their
    total is bounded."""
    gen = ref_module.Generator(
        FakeRuntime(), None, exclude_input_in_output=True, decoupled=False, max_input_len=8, max_seq_len=16
    )
    with pytest.raises(ValueError, match="over the engine's max_input_len 8"):
        list(gen(llm_request(list(range(12)), 2)))
    loop = llm_request(list(range(12)), 2, **{ref_module.st.BLS_LOOP: True})
    (ok,) = list(gen(loop))
    assert len(toks(ok)) >= 2
    with pytest.raises(ValueError, match="max_seq_len 16"):
        list(gen(llm_request(list(range(12)), 5, **{ref_module.st.BLS_LOOP: True})))

    class Req(pb.Request):
        def parameters(self):
            return '{"sdtk_bls_loop": true}'

    marked = ref_module.TritonPythonModel._inputs(Req(llm_request(list(range(12)), 2)))
    assert ref_module.st.BLS_LOOP in marked
    assert ref_module.st.BLS_LOOP not in ref_module.TritonPythonModel._inputs(pb.Request(llm_request([1], 2)))


def test_reference_neutral_knobs_are_accepted(ref_module):
    gen = ref_module.Generator(FakeRuntime(), None, exclude_input_in_output=True, decoupled=False)
    extra = dict(repetition_penalty=1.0, beam_width=1, min_tokens=0, return_log_probs=False,
                 bad_words_list=np.empty((1, 2, 0), np.int32), embedding_bias=np.zeros((1, 0), np.float32))  # fmt: skip
    (out,) = list(gen(llm_request([0, 5], 3, **extra)))
    assert toks(out) == greedy([0, 5], 3)


def test_the_served_modes_come_from_the_mode_registry(ref_module):
    """decoding_mode → mode: what the table in the model said before it derived it from
    toolkit.modes (each mode the reference backend serves, under its reference and engine names;
    the engine names EAGLE-3 `eagle`, as TensorRT-LLM's C++ backend does)."""
    assert ref_module.MODES == {
        "medusa": "medusa",
        "eagle": "eagle3",
        "eagle3": "eagle3",
        "lookahead": "lookahead",
        "ngram": "ngram",
        "sa": "sa",
    }


def test_resolve_spec(ref_module):
    built = {"mode": "medusa", "medusa_choices": [[0], [1]], "num_medusa_heads": 2}
    assert ref_module.resolve_spec(built, {"decoding_mode": ""}) == built
    assert ref_module.resolve_spec(built, {"decoding_mode": "top_k_top_p"}) is None
    assert ref_module.resolve_spec(built, {"decoding_mode": "medusa", "medusa_choices": "{0}, {0, 0}"})[
        "medusa_choices"
    ] == [[0], [0, 0]]
    with pytest.raises(ValueError, match="built for medusa"):
        ref_module.resolve_spec(built, {"decoding_mode": "lookahead"})
    with pytest.raises(ValueError, match="not supported"):
        ref_module.resolve_spec(built, {"decoding_mode": "beam_search"})
    assert (
        ref_module.resolve_spec({"mode": "draft_target", "max_draft_len": 4}, {"decoding_mode": ""}) is None
    )
    eagle = ref_module.resolve_spec(
        {"mode": "eagle3", "max_draft_len": 3}, {"decoding_mode": "eagle", "eagle_choices": "{0}, {1}"}
    )
    assert eagle["eagle_choices"] == [[0], [1]]
    la = {"mode": "lookahead", "window": 4, "ngram": 3, "verification_set": 4, "max_draft_len": 16}
    got = ref_module.resolve_spec(la, {"decoding_mode": "lookahead", "lookahead_window_size": "2",
                                       "lookahead_ngram_size": "2", "lookahead_verification_set_size": "1"})  # fmt: skip
    assert (got["window"], got["ngram"], got["verification_set"]) == (2, 2, 1) and "max_draft_len" not in got
    with pytest.raises(ValueError, match="needs all of"):
        ref_module.resolve_spec(la, {"decoding_mode": "lookahead", "lookahead_window_size": "2"})


def test_reference_model_execute(ref_module, pb, monkeypatch):
    monkeypatch.setattr(ref_module, "load_runtime", lambda path: (FakeRuntime(), {"mode": "none"}))
    monkeypatch.setattr(ref_module, "build_limits", lambda path: (512, 1024))
    monkeypatch.setattr(ref_module, "build_batch_size", lambda path, default: 4)
    params = {"gpt_model_path": "/engines/target", "decoding_mode": "top_k_top_p", "exclude_input_in_output": "True",
              "max_beam_width": "1"}  # fmt: skip
    model = ref_module.TritonPythonModel()
    model.initialize(args(model_config("tensorrt_llm", params, decoupled=True)))
    plain, stream = pb.Request(llm_request([0, 5], 3)), pb.Request(llm_request([0, 5], 5, streaming=True))
    bad = pb.Request(llm_request([0, 5], 3, beam_width=4))
    assert model.execute([plain, stream, bad]) is None
    assert model.wait_idle()  # generation runs in threads, batched in flight
    assert model.generate.rt.batching == (4, 1024 + 72)  # build_config.max_batch_size; max_seq_len + slack
    final = pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL
    assert [f for _, f in plain.sender.sent] == [0, final] and plain.sender.sent[1][0] is None
    assert toks(plain.sender.sent[0][0].as_dict()) == greedy([0, 5], 3)
    sent = stream.sender.sent
    assert [t for r, _ in sent[:-1] for t in toks(r.as_dict())] == greedy([0, 5], 5)
    assert sent[-1] == (None, final)
    assert "tensorrt_llm: beam_width" in bad.sender.sent[0][0].error().message()
    assert bad.sender.sent[0][0].error().code() == pb.TritonError.INVALID_ARG

    model = ref_module.TritonPythonModel()
    model.initialize(args(model_config("tensorrt_llm_draft", params, decoupled=False)))
    # Not decoupled, as the C++ backend: execute() returns at once (requests of later calls join
    # the batch) and each request gets exactly one response, with the final flag.
    one, streamed = pb.Request(llm_request([0, 5], 3)), pb.Request(llm_request([0, 5], 3, streaming=True))
    assert model.execute([one, streamed]) is None
    assert model.wait_idle()
    assert [f for _, f in one.sender.sent] == [final]
    assert not one.sender.sent[0][0].has_error() and toks(one.sender.sent[0][0].as_dict()) == greedy(
        [0, 5], 3
    )
    assert [f for _, f in streamed.sender.sent] == [final]
    assert "tensorrt_llm_draft: Streaming is only supported" in streamed.sender.sent[0][0].error().message()
    with pytest.raises(ValueError, match="max_beam_width"):
        ref_module.TritonPythonModel().initialize(
            args(model_config("tensorrt_llm", {**params, "max_beam_width": "4"}))
        )


def test_reference_stop_request_cancels_the_running_request_of_its_id(ref_module, pb, monkeypatch):
    """TensorRT-LLM's `stop` input: a request with stop=true and a request id cancels the running
    requests of that id (how sdtk's BLS stops its sub-request); without an id it is refused."""

    class SlowRuntime(FakeRuntime):
        def verify_draft(self, input_ids, draft_ids, **kw):
            time.sleep(0.01)  # 1000 tokens would take 10 s
            return super().verify_draft(input_ids, draft_ids, **kw)

    monkeypatch.setattr(ref_module, "load_runtime", lambda path: (SlowRuntime(), {"mode": "none"}))
    monkeypatch.setattr(ref_module, "build_limits", lambda path: (512, 1024))
    monkeypatch.setattr(ref_module, "build_batch_size", lambda path, default: 4)
    params = {"gpt_model_path": "/engines/target", "decoding_mode": "top_k_top_p"}
    model = ref_module.TritonPythonModel()
    model.initialize(args(model_config("tensorrt_llm", params, decoupled=True)))
    running = pb.Request(llm_request([0, 5], 1000, end_id=-1, streaming=True), request_id="sub-1")
    other = pb.Request(llm_request([0, 5], 4), request_id="sub-2")
    model.execute([running, other])
    time.sleep(0.2)
    stop = pb.Request(llm_request([0, 5], 1, stop=True), request_id="sub-1")
    anonymous = pb.Request(llm_request([0, 5], 1, stop=True))
    model.execute([stop, anonymous])
    assert model.wait_idle(timeout=5)  # the 1000-token request ended long before its 10 s
    # ended as TensorRT-LLM ends a stopped request: a plain final response, no error
    assert running.sender.sent[-1] == (None, pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    assert sum(len(toks(r.as_dict())) for r, _ in running.sender.sent[:-1]) < 1000
    assert toks(other.sender.sent[0][0].as_dict()) == [0, 5, *greedy([0, 5], 4)]  # another id runs on
    assert not stop.sender.sent[0][0].has_error()
    error = anonymous.sender.sent[0][0].error()
    assert error.code() == pb.TritonError.INVALID_ARG and "request id" in error.message()
    model.finalize()


def test_bls_plain_path_stops_its_sub_request_when_the_client_has_gone(bls_module, pb, monkeypatch):
    """A decoupled BLS cannot cancel a sub-request in Triton 2.51: once its client has gone, it
    sends tensorrt_llm a `stop` request with the sub-request's id, and ends as cancelled."""
    made = []
    real = pb.InferenceRequest.__init__

    def record(self, *a, **kw):
        real(self, *a, **kw)
        made.append(self)

    monkeypatch.setattr(pb.InferenceRequest, "__init__", record)
    bls = make_bls(bls_module, decoupled=True)
    with pytest.raises(bls_module.st.Cancelled):
        list(bls(request(max_tokens=12, stream=True, num_draft_tokens=0), cancelled=lambda: True))
    sub, stop = [r for r in made if r.model_name == "tensorrt_llm"]
    assert sub.request_id and "stop" not in sub.inputs
    assert stop.request_id == sub.request_id and stop.inputs["stop"].all()


def test_bls_and_reference_together_are_lossless(bls_module, ref_module, pb):
    """The BLS loop over two reference models (target and a wrong-now-and-then draft)."""

    def serve(gen):
        return lambda inputs, requested, decoupled: list(gen(inputs))

    pb.MODELS["tensorrt_llm"] = serve(
        ref_module.Generator(FakeRuntime(), None, exclude_input_in_output=True, decoupled=False)
    )
    pb.MODELS["tensorrt_llm_draft"] = serve(
        ref_module.Generator(FakeRuntime(draft_token), None, exclude_input_in_output=True, decoupled=False)
    )
    bls = make_bls(bls_module)
    (out,) = list(bls(request(max_tokens=25, num_draft_tokens=4, return_perf_metrics=True)))
    assert ids_of(out["text_output"]) == greedy(prompt_of("abc"), 25)
    assert int(out["total_draft_tokens"][0, 0]) > 0


@pytest.fixture(scope="module")
def tiny_runtime():
    pytest.importorskip("torch")
    from pathlib import Path

    from toolkit.reference import ReferenceRuntime

    return ReferenceRuntime.load(Path(__file__).resolve().parents[2] / "models" / "tiny" / "target")


def test_reference_sampling_knobs_and_outputs(ref_module, tiny_runtime):
    """With the real runtime: TensorRT-LLM's sampling defaults, the 0.19 names (min_length,
    random_seed), bad_words_list, log probs / generation logits shapes per response, and
    num_return_sequences as one response per sequence."""
    import torch

    rt = tiny_runtime
    gen = ref_module.Generator(rt, None, exclude_input_in_output=True, decoupled=True)
    prompt = rt.tokenizer("def read_lines(path):\n")["input_ids"]
    from toolkit.reference import PLAIN

    greedy_ids = rt.generate(prompt, 8, spec=PLAIN, end_id=-1).token_ids
    # temperature 1 without top_k/top_p is greedy, as TensorRT-LLM's defaults make it.
    (out,) = list(gen(llm_request(prompt, 8, temperature=np.float32(1.0), end_id=-1)))
    assert toks(out) == greedy_ids
    # Sampling without a seed samples with seed 0: the same tokens every time.
    knobs = dict(temperature=np.float32(1.0), runtime_top_p=np.float32(0.95), end_id=-1)
    a, b = (toks(list(gen(llm_request(prompt, 8, **knobs)))[0]) for _ in range(2))
    assert a == b == toks(list(gen(llm_request(prompt, 8, random_seed=np.uint64(0), **knobs)))[0])
    # bad_words_list ([2, N]: ids, then end offsets) and min_length (0.19's min_tokens).
    bad = np.array([[[greedy_ids[0], greedy_ids[1], greedy_ids[2]], [1, 3, -1]]], np.int32)
    (out,) = list(gen(llm_request(prompt, 8, bad_words_list=bad, end_id=-1)))
    got = toks(out)
    assert got[0] != greedy_ids[0] and greedy_ids[0] not in got
    (out,) = list(gen(llm_request(prompt, 4, min_length=np.int32(3), end_id=greedy_ids[0])))
    assert greedy_ids[0] not in toks(out)[:3]
    # Log probs and generation logits: [1, beams, tokens] / [1, beams] / [1, beams, tokens, vocab];
    # normalize_log_probs true (upstream's default) gives greedy tokens 0.
    (out,) = list(
        gen(llm_request(prompt, 5, end_id=-1, return_log_probs=True, return_generation_logits=True))
    )
    assert out["output_log_probs"].shape == (1, 1, 5) and not out["output_log_probs"].any()
    assert out["cum_log_probs"].shape == (1, 1)
    vocab = rt.target.config.vocab_size
    assert out["generation_logits"].shape == (1, 1, 5, vocab)
    with torch.inference_mode():
        logits = rt.target.model(torch.tensor([prompt + greedy_ids[:4]])).logits[0, len(prompt) - 1 :]
    assert np.allclose(out["generation_logits"][0, 0], logits.numpy(), atol=1e-4)
    chunks = list(gen(llm_request(prompt, 5, streaming=True, return_log_probs=True, **knobs)))
    sampled = list(gen(llm_request(prompt, 5, return_log_probs=True, **knobs)))[0]
    streamed = np.concatenate([c["output_log_probs"][0, 0] for c in chunks])
    assert np.allclose(streamed, sampled["output_log_probs"][0, 0]) and (streamed < 0).all()
    assert np.isclose(chunks[-1]["cum_log_probs"][0, 0], streamed.sum(), atol=1e-5)
    # num_return_sequences: one response per sequence, each with its sequence_index; distinct seeds.
    outs = list(gen(llm_request(prompt, 8, num_return_sequences=np.int32(3), seed=np.uint64(5), **knobs)))
    assert [int(o["sequence_index"][0, 0]) for o in outs] == [0, 1, 2]
    assert len({tuple(toks(o)) for o in outs}) > 1
    assert toks(outs[0]) == toks(list(gen(llm_request(prompt, 8, seed=np.uint64(5), **knobs)))[0])


def test_reference_draft_target_loader_pads_the_target(ref_module, tmp_path):
    """A draft-target engine directory loads its checkpoint alone; reference.inflate still pads it."""
    tiny = Path(__file__).resolve().parents[2] / "models" / "tiny"
    ref = {"checkpoint": str(tiny / "target"), "tokenizer": None, "inflate": 2}
    ref["speculative"] = {"mode": "draft_target", "max_draft_len": 2}
    (tmp_path / "config.json").write_text(
        json.dumps({"pretrained_config": {"dtype": "float32"}, "reference": ref})
    )
    runtime, built = ref_module.load_runtime(tmp_path)
    assert built["mode"] == "draft_target" and runtime.inflate == 2 and runtime.draft is None
    width = runtime.target.model.model.layers[0].mlp.gate_proj.out_features
    assert width == 2 * json.loads((tiny / "target" / "config.json").read_text())["intermediate_size"]


@pytest.mark.parametrize("name", ["tiny-lookahead-bf16", "tiny-lookahead"])
def test_plan_probes_in_the_dtype_the_served_model_computes_in(ref_module, tmp_path, name):
    """`sdtk plan`'s in-process runtime (bench.measure.inprocess.load_runtime) computes in what the
    served tensorrt_llm model loads from the built engine directory: bfloat16 for a recipe that
    asks for it (it was float32 whatever the recipe said), float32 for `auto`."""
    from toolkit.bench.measure.inprocess import load_runtime
    from toolkit.build import build
    from toolkit.recipe import load_recipe

    rec = load_recipe(name)
    r = build(rec, backend="reference", workdir=tmp_path / "wd", progress=lambda _msg: None)
    served, _ = ref_module.load_runtime(Path(r.outputs["target"]))
    assert load_runtime(rec).dtype == served.dtype == ("bfloat16" if name.endswith("bf16") else "float32")
