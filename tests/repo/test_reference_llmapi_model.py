"""sdtk's reference llmapi model (model_repo_templates/reference_llmapi) against a fake
triton_python_backend_utils, with the real reference runtime on the tiny models: request checks,
cancellation and upstream's response shapes. The end-to-end contract on the real Triton server is
in tests/integration/test_reference_llmapi.py."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "models" / "tiny"
MODEL = "reference_llmapi/tensorrt_llm/1/model.py"


def model_config(tmp_path: Path, version: str | None = None) -> str:
    """Triton's `model_config` JSON of the llmapi config.pbtxt sdtk renders for `version` (None: newest)."""
    from google.protobuf import json_format, text_format
    from tritonclient.grpc import model_config_pb2

    from tests.repo.conftest import engines_for, llmapi_options, make_recipe
    from toolkit.repo import render_repository

    recipe = make_recipe("llmapi", "none", **({"trtllm_version": version} if version else {}))
    r = render_repository(
        recipe,
        engines_for(tmp_path, recipe, "llmapi"),
        tmp_path / "repo",
        backend="llmapi",
        llmapi_options=llmapi_options(recipe),
        trtllm_dir=tmp_path / "none",
    )
    cfg = text_format.Parse(
        (r.path / "tensorrt_llm/config.pbtxt").read_text(), model_config_pb2.ModelConfig()
    )
    return json.dumps(json_format.MessageToDict(cfg, preserving_proto_field_name=True))


@pytest.fixture(scope="module")
def newest_config(tmp_path_factory) -> str:
    return model_config(tmp_path_factory.mktemp("newest"))


@pytest.fixture
def model(load_model, monkeypatch, newest_config):
    mod = load_model(MODEL)
    args = {
        "model": str(TINY / "target"),
        "backend": "pytorch",
        "max_seq_len": 64,
        "dtype": "float32",
        "speculative_config": {"decoding_type": "NGram", "max_draft_len": 3, "max_matching_ngram_size": 2},
        "triton_config": {"max_batch_size": 0, "decoupled": True},
    }
    monkeypatch.setattr(mod, "model_yaml", lambda: args)
    m = mod.TritonPythonModel()
    m.initialize({"model_config": newest_config})
    return mod, m


def _request(pb, inputs, cancel_after=None):
    class Req(pb.Request):
        calls = 0

        def request_id(self):
            return ""

        def is_cancelled(self):
            Req.calls += 1
            return cancel_after is not None and Req.calls > cancel_after

    return Req({k: np.asarray(v) for k, v in inputs.items()})


def _finished(pb, req, timeout=60.0):
    """Wait for the request's FINAL response (its own thread sends it after execute() returned)."""
    deadline = time.monotonic() + timeout
    while not any(f & pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL for _, f in req.sender.sent):
        assert time.monotonic() < deadline, "no final response"
        time.sleep(0.005)
    return req.sender.sent


def _run(pb, m, inputs, **kw):
    req = _request(pb, inputs, **kw)
    assert m.execute([req]) is None  # decoupled: everything goes through the sender
    return _finished(pb, req)


def test_greedy_text_and_perf_strings(pb, model):
    _mod, m = model
    sent = _run(pb, m, {"text_input": np.array([b"def fib(n):"], dtype=object),
                        "sampling_param_max_tokens": np.array([8], np.int32),
                        "sampling_param_exclude_input_from_output": np.array([True]),
                        "sampling_param_return_perf_metrics": np.array([True])})  # fmt: skip
    ((resp, flags),) = sent
    assert flags == pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL and not resp.has_error()
    out = resp.as_dict()
    assert out["text_output"].dtype == object and out["acceptance_rate"].dtype == object
    from toolkit.generate import run_generate
    from toolkit.recipe import load_recipe

    want = run_generate(load_recipe(ROOT / "recipes/tiny-ngram-llmapi.yaml"), "def fib(n):", 8,
                        no_speculation=True, temperature=0.0, top_k=0, top_p=1.0, seed=None)  # fmt: skip
    assert out["text_output"][0].decode() == want["text"]


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        (
            {"sampling_param_max_tokens": np.array([0], np.int32)},
            "sampling_param_max_tokens must be at least 1",
        ),
        ({"sampling_param_max_tokens": np.array([60], np.int32)}, "exceeds max_seq_len 64"),
        ({"sampling_param_best_of": np.array([2], np.int32)}, "sampling_param_best_of"),
        (
            {"streaming": np.array([True]), "text_input": np.array([[b"a"], [b"b"]], dtype=object)},
            "1D tensor",
        ),
    ],
)
def test_refusals_name_the_input(pb, model, inputs, message):
    _mod, m = model
    sent = _run(pb, m, {"text_input": np.array([b"def fib(n):"], dtype=object), **inputs})
    ((resp, flags),) = sent
    assert resp.has_error() and message in resp.error().message()
    assert resp.error().code() == pb.TritonError.INVALID_ARG  # HTTP 400, not 500


def test_cancellation_is_checked_every_step(pb, model):
    _mod, m = model
    sent = _run(pb, m, {"text_input": np.array([b"def fib(n):"], dtype=object),
                        "sampling_param_max_tokens": np.array([20], np.int32),
                        "streaming": np.array([True])}, cancel_after=2)  # fmt: skip
    resp, flags = sent[-1]
    assert flags == pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL
    assert resp.has_error() and "Request cancelled by client" in resp.error().message()
    assert len(sent) <= 3  # at most the streamed chunks before the check fired, then the error


def test_streaming_needs_decoupled(pb, load_model, monkeypatch, newest_config):
    mod = load_model(MODEL)
    args = {
        "model": str(TINY / "target"),
        "max_seq_len": 64,
        "triton_config": {"max_batch_size": 0, "decoupled": False},
    }
    monkeypatch.setattr(mod, "model_yaml", lambda: args)
    m = mod.TritonPythonModel()
    m.initialize({"model_config": newest_config})
    req = _request(pb, {"text_input": np.array([b"x"], dtype=object), "streaming": np.array([True])})
    (resp,) = m.execute([req])
    assert resp.has_error() and "Streaming is only supported in decoupled mode." in resp.error().message()


def test_streaming_sends_each_step_at_once_and_the_last_step_as_final(pb, model, monkeypatch):
    """Upstream queues each streamed RequestOutput for sending as it comes and marks the finished
    one FINAL (model.py `_execute_single_request`): one response per step, none held back until the
    next step, no extra response after the last step."""
    _mod, m = model
    inputs = {"text_input": np.array([b"def fib(n):"], dtype=object),
              "sampling_param_max_tokens": np.array([12], np.int32),
              "sampling_param_exclude_input_from_output": np.array([True]),
              "streaming": np.array([True])}  # fmt: skip
    req = _request(pb, inputs)
    generate = m.runtime.generate
    seen: list[int] = []  # responses already sent when step k reports its tokens

    def watched(*args, on_tokens, **kwargs):
        def step(tokens):
            deadline = time.monotonic() + 3.0  # the step before this one must be out by now
            while len(req.sender.sent) < len(seen) and time.monotonic() < deadline:
                time.sleep(0.005)
            seen.append(len(req.sender.sent))
            on_tokens(tokens)

        return generate(*args, on_tokens=step, **kwargs)

    monkeypatch.setattr(m.runtime, "generate", watched)
    assert m.execute([req]) is None
    sent = _finished(pb, req)
    assert seen == list(range(len(seen))) and len(seen) > 1
    assert len(sent) == len(seen)  # one response per step, the last step's is the final one
    assert [f for _, f in sent] == [0] * (len(sent) - 1) + [pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL]
    texts = [r.as_dict()["text_output"][0].decode() for r, _ in sent]
    assert all(not r.has_error() for r, _ in sent) and len(set(texts)) == len(texts)
    # The whole-request yardstick runs unwatched: `step` would wait out its 3-s deadline at each of its
    # steps for responses of the streamed request above that never come (~30 s, nothing checked).
    monkeypatch.setattr(m.runtime, "generate", generate)
    plain = _run(pb, m, {k: v for k, v in inputs.items() if k != "streaming"})
    assert texts[-1] == plain[-1][0].as_dict()["text_output"][0].decode()


def test_requests_are_batched_in_flight(pb, model):
    """Decoupled, as LLM(): execute() returns at once and each request runs in its own thread,
    the runtime batching their steps; a request sent while another generates is answered before
    that one ends, with the same greedy text as alone."""
    _mod, m = model
    long = {"text_input": np.array([b"def fib(n):"], dtype=object),
            "sampling_param_max_tokens": np.array([48], np.int32),
            "sampling_param_exclude_input_from_output": np.array([True]),
            "streaming": np.array([True])}  # fmt: skip
    short = {**long, "sampling_param_max_tokens": np.array([2], np.int32), "streaming": np.array([False])}
    alone = _run(pb, m, short)[-1][0].as_dict()["text_output"][0].decode()
    a, b = _request(pb, long), _request(pb, short)
    assert m.execute([a]) is None
    deadline = time.monotonic() + 30
    while not a.sender.sent:  # a generates
        assert time.monotonic() < deadline
        time.sleep(0.005)
    assert m.execute([b]) is None
    _finished(pb, b)
    a_done = any(f & pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL for _, f in a.sender.sent)
    assert not a_done  # b was answered while a still generated (one at a time: after a's end)
    assert len(_finished(pb, a)) > 1
    assert b.sender.sent[-1][0].as_dict()["text_output"][0].decode() == alone
    assert m.runtime.batcher.batch_sizes.get(2, 0) > 0  # iterations that ran both sequences


@pytest.mark.parametrize("version", ["1.1.0", None])
def test_reads_only_the_inputs_its_config_declares(pb, load_model, monkeypatch, tmp_path, version):
    """The config of a declared TensorRT-LLM 1.1 has no image_url or lora_* input
    (tests/contracts/trtllm-1.1.json `at_tag.absent`): the model never asks a request for them
    (Triton core refuses undeclared inputs before the model sees the request). The newest config
    declares them, and the model refuses them as features the reference runtime lacks."""
    from toolkit.repo.versions import LLMAPI_LATE_INPUTS

    mod = load_model(MODEL)
    args = {"model": str(TINY / "target"), "max_seq_len": 64,
            "triton_config": {"max_batch_size": 0, "decoupled": False}}  # fmt: skip
    monkeypatch.setattr(mod, "model_yaml", lambda: args)
    config = model_config(tmp_path, version)
    declared = {t["name"] for t in json.loads(config)["input"]}
    asked: list[str] = []
    real = pb.get_input_tensor_by_name
    monkeypatch.setattr(pb, "get_input_tensor_by_name", lambda r, n: asked.append(n) or real(r, n))
    m = mod.TritonPythonModel()
    m.initialize({"model_config": config})
    req = _request(pb, {"text_input": np.array([b"x"], dtype=object),
                        "sampling_param_max_tokens": np.array([2], np.int32),
                        "lora_id": np.array([7], np.uint64)})  # fmt: skip
    (resp,) = m.execute([req])
    assert set(asked) <= declared, sorted(set(asked) - declared)
    if version is None:
        assert set(LLMAPI_LATE_INPUTS) <= declared
        assert resp.has_error() and "input lora_id is not supported" in resp.error().message()
    else:
        assert not set(LLMAPI_LATE_INPUTS) & declared
        assert not resp.has_error() and resp.as_dict()["text_output"].size == 1


def test_a_request_whose_thread_cannot_start_fails_alone(pb, model, monkeypatch):
    """Decoupled: the request whose thread cannot start (an exhausted address space) gets its own
    error from execute(), which never raises (the Python backend would close the senders of the
    requests already started); the others are served."""
    mod, m = model
    body = {"text_input": np.array([b"def fib(n):"], dtype=object),
            "sampling_param_max_tokens": np.array([4], np.int32)}  # fmt: skip
    first, failing, third = (_request(pb, body) for _ in range(3))
    real_start, starts = mod.threading.Thread.start, []

    def start(thread):
        starts.append(thread)
        if len(starts) == 2:
            raise RuntimeError("can't start new thread")
        real_start(thread)

    with monkeypatch.context() as patch:
        patch.setattr(mod.threading.Thread, "start", start)
        assert m.execute([first, failing, third]) is None
    (response, flags), *more = failing.sender.sent
    assert not more and flags == pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL
    assert "can't start new thread" in response.error().message()
    assert response.error().code() == pb.TritonError.UNAVAILABLE
    for ok in (first, third):
        assert not _finished(pb, ok)[-1][0].has_error()
    assert starts[1] not in m._threads
