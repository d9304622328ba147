"""`sdtk doctor --url`: every verdict branch against a small fake Triton HTTP endpoint, plus the
errors for URLs where nothing (or not Triton) answers. The real server: test_triton_live.py."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from toolkit.errors import ServerError, UsageError
from toolkit.ops.health import SpeculationProbe, check_deployment, default_metrics_url
from toolkit.server.ports import free_ports

CONFIG = {
    "name": "ensemble",
    "max_batch_size": 0,
    "input": [
        {"name": "text_input", "data_type": "TYPE_STRING", "dims": [1]},
        {"name": "max_tokens", "data_type": "TYPE_INT32", "dims": [1]},
        {"name": "return_perf_metrics", "data_type": "TYPE_BOOL", "dims": [1], "optional": True},
    ],
    "output": [{"name": "text_output", "data_type": "TYPE_STRING", "dims": [1]}],
}


class FakeTriton(BaseHTTPRequestHandler):
    state: dict = {}

    def log_message(self, *args):  # quiet
        pass

    def _send(self, code: int, body: object = None, ctype: str = "application/json") -> None:
        data = (
            b"" if body is None else (body.encode() if isinstance(body, str) else json.dumps(body).encode())
        )
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802
        st = self.state
        if self.path == "/v2/health/live":
            self._send(200)
        elif self.path in ("/v2/health/ready", "/v2/models/ensemble/ready"):
            self._send(200 if st["ready"] else 400)
        elif self.path == "/v2/models/ensemble/config":
            self._send(200, CONFIG)
        elif self.path == "/metrics":
            self._send(200, st["metrics"], "text/plain")
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self):  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if self.path == "/v2/repository/index":
            self._send(200, self.state["index"])
        elif self.path == "/v2/models/ensemble/generate":
            self.state["requests"].append(body)
            self._send(200, {"model_name": "ensemble", "text_output": "hello", **self.state["outputs"]})
        else:
            self._send(404, {"error": "not found"})


@pytest.fixture
def fake():
    FakeTriton.state = {
        "ready": True,
        "index": [{"name": "ensemble", "version": "1", "state": "READY"}],
        "outputs": {"acceptance_rate": 0.5, "total_accepted_draft_tokens": 12, "total_draft_tokens": 24},
        "metrics": 'nv_inference_request_success{model="ensemble",version="1"} 3\n',
        "requests": [],
    }
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeTriton)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    url = f"http://127.0.0.1:{server.server_port}"
    yield url, FakeTriton.state
    server.shutdown()
    server.server_close()


def run(url: str, **kw):
    """`kw`: the speculation probe's fields (SpeculationProbe)."""
    return check_deployment(url, "ensemble", metrics_url=url + "/metrics", probe=SpeculationProbe(**kw))


def test_healthy_with_speculation_active(fake):
    url, st = fake
    report = run(url, draft_len=4)
    assert report.ok, report.to_dict()
    assert report.verdict.startswith("HEALTHY") and "speculation active" in report.verdict
    assert [c.name for c in report.checks] == ["live", "ready", "models", "model", "metrics", "speculation"]
    assert report.speculation["acceptance_length"] == pytest.approx(3.0)  # 1 + 12 / (24 / 4)
    assert st["requests"][0]["return_perf_metrics"] is True
    json.dumps(report.to_dict())


def test_nothing_accepted_points_at_a_tokenizer_mismatch(fake):
    url, st = fake
    st["outputs"] = {"acceptance_rate": 0.0, "total_accepted_draft_tokens": 0, "total_draft_tokens": 24}
    report = run(url)
    assert not report.ok
    spec = report.check("speculation")
    assert spec.status == "failed" and spec.value == "nothing accepted" and "tokenizer" in spec.hint


def test_no_drafts_is_inactive(fake):
    url, st = fake
    st["outputs"] = {"acceptance_rate": 0.0, "total_accepted_draft_tokens": 0, "total_draft_tokens": 0}
    assert run(url).verdict.startswith("UNHEALTHY: speculation: inactive")
    baseline = run(url, expect=False)
    assert baseline.ok and baseline.verdict.startswith("SERVING")
    st["outputs"] = {}
    assert run(url).check("speculation").detail.startswith("the response carries no acceptance outputs")


def test_models_not_ready_and_missing(fake):
    url, st = fake
    st["ready"] = False
    st["index"] = [
        {"name": "ensemble", "version": "1", "state": "UNAVAILABLE", "reason": "Expected integer, got: $"},
        {"name": "tensorrt_llm", "version": "1", "state": "READY"},
    ]
    report = run(url)
    assert not report.ok
    assert "Expected integer, got: $" in report.check("models").detail
    assert report.check("speculation").status == "skipped"
    st["index"] = [{"name": "ensembel", "state": "READY"}]
    assert "did you mean 'ensembel'" in run(url).check("models").hint


def test_metrics_endpoint_unreachable_is_a_failed_check(fake):
    url, _ = fake
    port = free_ports(1)[0]
    report = check_deployment(url, "ensemble", metrics_url=f"http://127.0.0.1:{port}/metrics")
    m = report.check("metrics")
    assert m.status == "failed" and "--metrics-url" in m.hint


def test_unreachable_url_is_a_clear_error():
    port = free_ports(1)[0]
    with pytest.raises(ServerError, match=f"no Triton server answers at http://127.0.0.1:{port}") as e:
        check_deployment(f"127.0.0.1:{port}", timeout=2)
    assert "port-forward" in e.value.hint


@pytest.mark.parametrize("bad", ["", "   ", "ftp://host:8000", "http://:8000", "http://host:99999"])
def test_malformed_urls_are_usage_errors(bad):
    with pytest.raises(UsageError):
        check_deployment(bad)


def test_not_triton_is_a_clear_error(fake):
    url, _ = fake
    with pytest.raises(ServerError, match="not a Triton HTTP endpoint"):
        check_deployment(url + "/nope")


def test_default_metrics_url():
    assert default_metrics_url("localhost:8000") == "http://localhost:8002/metrics"
    assert default_metrics_url("https://[::1]:9000/") == "https://[::1]:8002/metrics"
