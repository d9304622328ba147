"""tests/triton_support.py: the shared config builder and live-deployment fixture work."""

from __future__ import annotations

import pytest
from triton_support import config_pbtxt, live_deployment

from toolkit.client import TritonClient
from toolkit.server import procs
from toolkit.server.state import read_state


def test_config_builder_writes_a_config_triton_parses():
    text = config_pbtxt(
        "m",
        inputs=[("text_input", "TYPE_STRING", "1", False), ("max_tokens", "TYPE_INT32", "1", True)],
        outputs=[("text_output", "TYPE_STRING", "-1")],
        decoupled=True,
        max_batch_size=4,
        parameters={"draft_len": "4"},
    )
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    cfg = text_format.Parse(text, model_config_pb2.ModelConfig())
    assert cfg.name == "m" and cfg.model_transaction_policy.decoupled and cfg.max_batch_size == 4
    assert [i.name for i in cfg.input] == ["text_input", "max_tokens"] and cfg.input[1].optional
    assert cfg.parameters["draft_len"].string_value == "4"
    with pytest.raises(text_format.ParseError):
        config_pbtxt("m", inputs=[("x", "TYPE_NOPE", "1", False)], outputs=[])


@pytest.mark.slow
@pytest.mark.tritonserver
def test_live_deployment_serves_losslessly_and_stops(live_deployment_factory, tmp_path):
    from integration.test_deploy import greedy_reference

    prompt = "def fibonacci(n):"
    d = live_deployment_factory("tiny-ngram")
    with TritonClient(d.http_url, model=d.model, timeout=60) as c:
        served = c.generate(prompt, max_tokens=8, temperature=0.0, exclude_input_in_output=True).text
    # Speculative (n-gram) and lossless: the target's own greedy continuation, from transformers.
    assert served == greedy_reference(prompt, 8)

    # The context manager behind the fixture stops what it started.
    with live_deployment("tiny-baseline", tmp_path / "cm") as b:
        st = read_state(b.workdir)
        assert st is not None and procs.alive(st.pid)
    assert not procs.alive(st.pid) and read_state(b.workdir) is None
