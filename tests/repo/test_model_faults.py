"""sdtk's reference tensorrt_llm model when a request's thread, memory or response cannot be had:
that request ends with its own error and every other one is served (against the fake
`triton_python_backend_utils`; tests/stress/test_served_faults.py forces the same faults in a
real Triton through SDTK_FAULT_INJECT).

The rule under test: the Responder never holds the sender of a request that execute() did not
hand over, and execute() never raises once it handed one over (the Python backend would close
that sender under the Responder: tritonserver 2.51 then segfaults in
TRITONBACKEND_ResponseFactoryIsCancelled)."""

from __future__ import annotations

import pytest

from .test_python_models import FakeRuntime, args, greedy, llm_request, model_config, ref_module, toks

__all__ = ["ref_module"]  # the fixture, shared with test_python_models

FINAL = 1


@pytest.fixture
def served(ref_module, pb, monkeypatch):
    """make(decoupled, faults) → an initialized reference model on the fake runtime."""
    monkeypatch.setattr(ref_module, "load_runtime", lambda path: (FakeRuntime(), {"mode": "none"}))
    monkeypatch.setattr(ref_module, "build_limits", lambda path: (512, 1024))
    monkeypatch.setattr(ref_module, "build_batch_size", lambda path, default: 4)
    made = []

    def make(decoupled: bool = True, faults: str = ""):
        monkeypatch.setenv("SDTK_FAULT_INJECT", faults)
        model = ref_module.TritonPythonModel()
        params = {"gpt_model_path": "/engines/target", "decoding_mode": "top_k_top_p",
                  "exclude_input_in_output": "True"}  # fmt: skip
        model.initialize(args(model_config("tensorrt_llm", params, decoupled=decoupled)))
        made.append(model)
        return model

    yield make
    for model in made:
        model.finalize()


def ended_once(request) -> None:
    flags = [f for _, f in request.sender.sent]
    assert flags.count(FINAL) == 1 and flags[-1] == FINAL, request.sender.sent


def error_of(request):
    """The request's one error; decoupled, it is followed by the empty FINAL response only."""
    errors = [
        (i, r.error()) for i, (r, _) in enumerate(request.sender.sent) if r is not None and r.has_error()
    ]
    assert len(errors) == 1, request.sender.sent
    i, error = errors[0]
    assert request.sender.sent[i + 1 :] in ([], [(None, FINAL)]), request.sender.sent
    return error


def streamed_tokens(request) -> list[int]:
    return [
        t for r, _ in request.sender.sent if r is not None and not r.has_error() for t in toks(r.as_dict())
    ]


def test_a_request_whose_thread_cannot_start_fails_alone(served, pb):
    model = served(faults="thread_start:2")
    first, second, third = (pb.Request(llm_request([0, 5], 6, streaming=True)) for _ in range(3))
    assert model.execute([first, second, third]) is None  # never raises: two were handed over
    assert model.wait_idle(timeout=10)
    error = error_of(second)
    assert "can't start new thread" in error.message() and error.code() == pb.TritonError.UNAVAILABLE
    assert second.sender.polls == 0  # the Responder never saw its sender
    ended_once(second)
    for ok in (first, third):
        ended_once(ok)
        assert streamed_tokens(ok) == greedy([0, 5], 6)
    later = pb.Request(llm_request([0, 5], 3))
    model.execute([later])  # the model serves on
    assert model.wait_idle(timeout=10) and toks(later.sender.sent[0][0].as_dict()) == greedy([0, 5], 3)


def test_a_chunk_that_cannot_be_allocated_ends_its_stream_with_an_error(served, pb):
    model = served(faults="alloc:2")
    cut = pb.Request(llm_request([0, 5], 8, streaming=True))
    model.execute([cut])
    assert model.wait_idle(timeout=10)
    ended_once(cut)
    error = error_of(cut)
    assert "out of memory" in error.message() and error.code() == pb.TritonError.UNAVAILABLE
    sent = streamed_tokens(cut)  # the first chunk, then nothing but the error
    assert len([r for r, _ in cut.sender.sent if r is not None and not r.has_error()]) == 1
    assert 0 < len(sent) < 8 and sent == greedy([0, 5], 8)[: len(sent)]
    other = pb.Request(llm_request([0, 5], 8, streaming=True))
    model.execute([other])
    assert model.wait_idle(timeout=10)
    ended_once(other)
    assert streamed_tokens(other) == greedy([0, 5], 8)


def test_a_single_response_that_cannot_be_allocated_is_an_error(served, pb):
    model = served(decoupled=False, faults="alloc:1")
    failed, ok = pb.Request(llm_request([0, 5], 3)), pb.Request(llm_request([0, 5], 3))
    model.execute([failed])
    assert model.wait_idle(timeout=10)
    model.execute([ok])
    assert model.wait_idle(timeout=10)
    ended_once(failed)
    assert "cannot allocate the response" in error_of(failed).message()
    ended_once(ok)
    assert toks(ok.sender.sent[0][0].as_dict()) == greedy([0, 5], 3)


def test_a_failing_cancel_probe_ends_its_request_and_the_responder_lives(served, pb, monkeypatch):
    model = served()
    monkeypatch.setattr(pb.ResponseSender, "is_cancelled", lambda self: 1 / 0)
    broken = pb.Request(llm_request([0, 5], 1000, end_id=-1, streaming=True))
    model.execute([broken])
    assert model.wait_idle(timeout=10)
    ended_once(broken)
    assert "division by zero" in error_of(broken).message()
    monkeypatch.undo()
    assert model.responder.thread.is_alive()


def test_an_unanswerable_request_raises_only_when_nothing_was_handed_over(served, pb, monkeypatch):
    model = served(faults="thread_start:1,thread_start:3")
    alone = pb.Request(llm_request([0, 5], 3))

    def no_memory(self, response=None, flags=0):
        raise MemoryError("no memory for the error either")

    monkeypatch.setattr(alone.sender, "send", no_memory.__get__(alone.sender))
    with pytest.raises(RuntimeError, match="can't start new thread"):
        model.execute([alone])  # nothing handed over: Triton answers the batch with the error
    served_first, unanswerable = pb.Request(llm_request([0, 5], 3)), pb.Request(llm_request([0, 5], 3))
    monkeypatch.setattr(unanswerable.sender, "send", no_memory.__get__(unanswerable.sender))
    assert model.execute([served_first, unanswerable]) is None  # one was handed over: never raise
    assert model.wait_idle(timeout=10)
    ended_once(served_first)
    assert toks(served_first.sender.sent[0][0].as_dict()) == greedy([0, 5], 3)


def test_fault_spec_is_checked(ref_module):
    faults = ref_module.st.Faults("alloc:2")
    faults.check("alloc")
    with pytest.raises(MemoryError, match="injected by SDTK_FAULT_INJECT: alloc:2"):
        faults.check("alloc")
    faults.check("alloc")  # once
    faults.check("thread_start")  # not asked for
    for bad in ("alloc", "alloc:0", "disk:1", "alloc:x"):
        with pytest.raises(ValueError, match="SDTK_FAULT_INJECT"):
            ref_module.st.Faults(bad)


def test_a_bls_stream_gets_its_failure_in_band(served, ref_module, pb, monkeypatch):
    """A sub-request of sdtk's BLS (request parameter st.BLS_STREAM) gets a failure after its
    first chunk as a fault chunk, a data response (Triton 2.51 loses such an error response on
    its way back to a BLS), which the BLS turns into its own error."""
    model = served(faults="alloc:2")
    cut = pb.Request(llm_request([0, 5], 8, streaming=True))
    monkeypatch.setattr(cut, "parameters", lambda: '{"sdtk_bls_stream": true}', raising=False)
    model.execute([cut])
    assert model.wait_idle(timeout=10)
    ended_once(cut)
    assert not any(r is not None and r.has_error() for r, _ in cut.sender.sent)
    fault = ref_module.st.fault_of(cut.sender.sent[-2][0].as_dict())
    assert (
        fault is not None and "cannot allocate the response" in fault and fault.startswith("tensorrt_llm: ")
    )


def test_the_bls_turns_a_fault_chunk_into_an_unavailable_error(load_model, pb):
    bls = load_model("inflight_batcher_llm/tensorrt_llm_bls/1/model.py")
    st = bls.st
    ok = {
        "output_ids": st.np.array([[[3, 4]]], st.np.int32),
        "sequence_length": st.np.array([[2]], st.np.int32),
    }
    assert st.fault_of(ok) is None
    chunks = (ok, st.fault_chunk("tensorrt_llm: no memory ✗"))
    responses = [pb.InferenceResponse([pb.Tensor(k, v) for k, v in d.items()]) for d in chunks]
    # the model's FINAL flag after the fault chunk: an empty response
    rest = iter([*responses, pb.InferenceResponse([])])
    got = []
    with pytest.raises(st.Unavailable, match="tensorrt_llm: tensorrt_llm: no memory ✗"):
        for tensors in bls._outputs("tensorrt_llm", rest):
            got.append(tensors)
    assert len(got) == 1
    # read to the end before raising: StubWatch.wait sees the request finished and sends the
    # model no `stop` request (which would be one more request that could fail)
    assert next(rest, None) is None
    error = st.failure("tensorrt_llm_bls", st.Unavailable("x")).error()
    assert error.code() == pb.TritonError.UNAVAILABLE
