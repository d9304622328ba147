"""Cancellation: a request whose client has gone stops generating.

The yardstick is the server's own counter of generated tokens (`sdtk_spec_output_tokens_total`
of the reference `tensorrt_llm` model, which also counts a cancelled request's partial output),
not a clock: long requests (1000 tokens) are abandoned after their first chunk, then a short one
is sent. The reference model batches requests in flight, so the short one is answered while
the others run: the test then waits until all four requests are counted (each is counted when
it ends, cancelled or not), and had the long ones run on, all of their tokens would be counted.

Scope (Triton 2.51): gRPC stream cancellation and HTTP streams that the client drops reach the
model that serves the request. An ensemble propagates a cancellation only between its steps
(core `ensemble_scheduler.cc`, `ScheduleSteps`), so through `ensemble` the running
`tensorrt_llm` step is not told; the BLS entry (draft-target) and direct calls of
`tensorrt_llm` are. Abandoned non-streaming HTTP requests are not detected by Triton's HTTP
frontend at all (its docs: cancellation comes from gRPC clients or the C API).
"""

from __future__ import annotations

import queue
import re
import time

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from toolkit import stress

pytestmark = [pytest.mark.tritonserver, pytest.mark.slow]
LONG = 1000


def generated(metrics_url: str, model: str = "tensorrt_llm", family: str = "output_tokens") -> float:
    text = httpx.get(metrics_url, timeout=10).text
    line = re.escape(f'sdtk_spec_{family}_total{{model="{model}"}} ')
    m = re.search("^" + line + r"(\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def counted(metrics_url: str, at_least: float, timeout: float = 300.0) -> None:
    """Wait until the model has counted `at_least` requests (a request is counted when it ends)."""
    deadline = time.monotonic() + timeout
    while generated(metrics_url, family="requests") < at_least:
        assert time.monotonic() < deadline, "the cancelled requests never ended"
        time.sleep(0.2)


def cancel_after_first(grpc_url: str, model: str, inputs: dict[str, np.ndarray]) -> None:
    """Start a gRPC stream, wait for its first response, then cancel it."""
    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(grpc_url)
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    tensors = []
    for name, value in inputs.items():
        dtype = "BYTES" if value.dtype == object else {"int32": "INT32", "bool": "BOOL"}[value.dtype.name]
        t = grpcclient.InferInput(name, list(value.shape), dtype)
        t.set_data_from_numpy(value)
        tensors.append(t)
    client.async_stream_infer(model, tensors)
    result, error = results.get(timeout=120)
    assert error is None, error
    client.stop_stream(cancel_requests=True)
    client.close()


def cancel_after(grpc_url: str, model: str, inputs: dict[str, np.ndarray], seconds: float) -> None:
    """A non-streaming gRPC request (the only kind a model that is not decoupled takes), cancelled by
    the client after `seconds` (tritonclient's `async_infer(...).cancel()`)."""
    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(grpc_url)
    tensors = []
    for name, value in inputs.items():
        dtype = "BYTES" if value.dtype == object else {"int32": "INT32", "bool": "BOOL"}[value.dtype.name]
        t = grpcclient.InferInput(name, list(value.shape), dtype)
        t.set_data_from_numpy(value)
        tensors.append(t)
    call = client.async_infer(model, tensors, callback=lambda result, error: results.put((result, error)))
    time.sleep(seconds)
    call.cancel()
    _, error = results.get(timeout=120)
    assert error is not None and "CANCELLED" in str(error.status()), error
    client.close()


@pytest.mark.parametrize("deployment", ["tiny-draft-target"], indirect=True)
def test_bls_stops_for_cancelled_requests(deployment):
    """Draft-target's BLS is not decoupled (as on the GPU path), so its clients cancel whole requests:
    the BLS loop asks is_cancelled() between iterations and stops calling the draft and the target."""
    _, result = deployment
    traffic = stress.Traffic(result.http_url, result.grpc_url, result.model)
    assert traffic.send("http", "def f(x):", 16).ok
    before = generated(result.metrics_url)
    long = {
        "text_input": np.array([[b"import os\n"]], dtype=object),
        "max_tokens": np.array([[LONG]], dtype=np.int32),
    }
    for _ in range(3):
        cancel_after(result.grpc_url, result.model, long, 0.5)
    short = traffic.send("http", "def f(x):", 16)
    assert short.ok, short.error
    spent = generated(result.metrics_url) - before
    assert 16 <= spent < LONG, f"{spent} tokens generated for 3 cancelled {LONG}-token requests"


@pytest.mark.parametrize("deployment", ["tiny-eagle3"], indirect=True)
def test_reference_model_stops_for_a_cancelled_stream(deployment):
    _, result = deployment
    ids = np.array([[1, 2, 3, 4, 5, 6, 7, 8]], dtype=np.int32)
    request = {
        "input_ids": ids,
        "input_lengths": np.array([[ids.shape[1]]], dtype=np.int32),
        "request_output_len": np.array([[LONG]], dtype=np.int32),
        "streaming": np.array([[True]]),
        "end_id": np.array([[-1]], dtype=np.int32),  # no end token: every request would run to LONG
    }
    before = generated(result.metrics_url)
    requests = generated(result.metrics_url, family="requests")
    for _ in range(3):
        cancel_after_first(result.grpc_url, "tensorrt_llm", request)
    traffic = stress.Traffic(result.http_url, result.grpc_url, result.model)
    short = traffic.send("http", "def f(x):", 16)
    assert short.ok, short.error
    counted(result.metrics_url, requests + 4)  # the 3 cancelled streams and the short request
    spent = generated(result.metrics_url) - before
    assert 16 <= spent < LONG, f"{spent} tokens generated for 3 cancelled {LONG}-token requests"
