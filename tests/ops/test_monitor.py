"""The sdtk_spec_* exporter: observe() and probes, scraped over HTTP; the Triton custom-metrics sink."""

from __future__ import annotations

import threading
import urllib.request
from dataclasses import dataclass, field

import pytest

from toolkit.ops import spec_metrics as sm

pc = pytest.importorskip("prometheus_client", reason="prometheus-client (a dependency of sdtk) is not installed")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from toolkit.client.errors import ResponseTimeout, ServerUnreachable  # noqa: E402
from toolkit.ops import monitor  # noqa: E402
from toolkit.ops.monitor import Monitor, ProbeRequest, SpecMetrics, backend_sink  # noqa: E402


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    """(sample name, sorted labels) -> value, from a live /metrics endpoint."""
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples, name, **labels) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def test_observe_is_published_over_http_on_a_free_port():
    m = SpecMetrics()
    sink = m.sink("ensemble")
    sink.observe(acceptance_rate=0.75, accepted=30, drafted=40, output_tokens=50, steps=20)
    sink.observe(acceptance_rate="0.5", accepted="10", drafted="20", output_tokens=None, steps=None)
    with m.serve(port=0, addr="127.0.0.1") as server:
        assert server.port > 0
        s = scrape(server.url)
    assert value(s, "sdtk_spec_requests_total", model="ensemble") == 2
    assert value(s, "sdtk_spec_draft_tokens_total", model="ensemble") == 60
    assert value(s, "sdtk_spec_accepted_tokens_total", model="ensemble") == 40
    assert value(s, "sdtk_spec_output_tokens_total", model="ensemble") == 50
    assert value(s, "sdtk_spec_steps_total", model="ensemble") == 20
    assert value(s, "sdtk_spec_acceptance_rate_count", model="ensemble") == 2
    assert value(s, "sdtk_spec_acceptance_rate_sum", model="ensemble") == pytest.approx(0.75 + 0.5)
    assert value(s, "sdtk_spec_acceptance_rate_bucket", model="ensemble", le="0.5") == 1
    # acceptance length only when steps are known (50 tokens / 20 steps)
    assert value(s, "sdtk_spec_acceptance_length_count", model="ensemble") == 1
    assert value(s, "sdtk_spec_acceptance_length_sum", model="ensemble") == pytest.approx(2.5)
    names = {fam for fam, _ in s}
    assert all(n.startswith("sdtk_spec_") for n in names)


def test_draft_len_estimates_steps_and_length():
    obs = sm.Observation.of(accepted=24, drafted=40, output_tokens=None, draft_len=4)
    assert obs.steps == 10 and obs.length == pytest.approx(3.4)  # 1 + 24/10
    obs = sm.Observation.of(accepted=24, drafted=40, output_tokens=34, draft_len=4)
    assert obs.length == pytest.approx(3.4)
    # no drafts: no rate, and garbage is ignored rather than recorded
    assert sm.Observation.of(acceptance_rate=0.0, accepted=0, drafted=0).rate is None
    assert sm.Observation.of(acceptance_rate="nan", accepted="x").rate is None
    assert sm.Observation.of(acceptance_rate=1.7).rate == 1.0


def test_default_metrics_record_through_a_model_sink(monkeypatch):
    monkeypatch.setattr(monitor, "_default", None)
    monitor.default_metrics().sink("m").observe(accepted=3, drafted=4)
    assert 'sdtk_spec_accepted_tokens_total{model="m"} 3.0' in monitor.default_metrics().exposition()


def test_every_sink_has_the_one_observe_signature():
    """One signature: Sink.observe; sinks only say how to record (no override of observe)."""
    import inspect

    sinks = [sm.TritonSpecMetrics, monitor.ModelSink, monitor._HttpSink]
    for cls in sinks:
        assert issubclass(cls, sm.Sink)
        assert cls.observe is sm.Sink.observe, cls
    assert list(inspect.signature(sm.Sink.observe).parameters) == [
        "self",
        "acceptance_rate",
        "accepted",
        "drafted",
        "output_tokens",
        "steps",
        "draft_len",
    ]
    assert not hasattr(SpecMetrics, "observe")  # multi-model: record(model, obs) or sink(model)


def test_serve_on_a_taken_port_is_a_clear_error():
    m = SpecMetrics()
    with m.serve(port=0, addr="127.0.0.1") as server, pytest.raises(Exception, match="cannot serve metrics"):
        SpecMetrics().serve(port=server.port, addr="127.0.0.1")


# --------------------------------------------------------------------------- probing (fake client)


@dataclass
class _Info:
    inputs: dict = field(
        default_factory=lambda: {"text_input": "BYTES", "max_tokens": "INT32", "return_perf_metrics": "BOOL"}
    )


@dataclass
class _Resp:
    model: str = "ensemble"
    acceptance_rate: float | None = 0.5
    total_accepted_draft_tokens: int | None = 16
    total_draft_tokens: int | None = 32
    output_tokens: int | None = 24
    latency_s: float = 0.01


class FakeClient:
    def __init__(self, outcomes):
        self.outcomes = list(outcomes)
        self.calls = []

    def model_info(self, refresh=False):
        return _Info()

    def generate(self, prompt, max_tokens, **params):
        self.calls.append(params)
        out = self.outcomes.pop(0)
        if isinstance(out, BaseException):
            raise out
        return out

    def close(self):
        pass


def test_monitor_probes_record_acceptance_errors_and_latency():
    client = FakeClient(
        [_Resp(), ServerUnreachable("down"), ResponseTimeout("slow"), RuntimeError("boom"), _Resp()]
    )
    m = SpecMetrics()
    mon = Monitor("http://x", model="ensemble", metrics=m, interval=0.01, client=client,
                  request=ProbeRequest(draft_len=4))  # fmt: skip
    results = []
    assert mon.run(iterations=5, on_probe=results.append) == 5
    assert [r.ok for r in results] == [True, False, False, False, True]
    assert [r.reason for r in results if not r.ok] == ["unreachable", "timeout", "error"]
    assert client.calls[0] == {"return_perf_metrics": True}
    with m.serve(port=0, addr="127.0.0.1") as server:
        s = scrape(server.url)
    assert value(s, "sdtk_spec_accepted_tokens_total", model="ensemble") == 32
    assert value(s, "sdtk_spec_draft_tokens_total", model="ensemble") == 64
    assert value(s, "sdtk_spec_probe_errors_total", model="ensemble", reason="unreachable") == 1
    assert value(s, "sdtk_spec_probe_errors_total", model="ensemble", reason="timeout") == 1
    assert value(s, "sdtk_spec_probe_latency_seconds", model="ensemble") >= 0
    assert value(s, "sdtk_spec_last_probe_success_timestamp_seconds", model="ensemble") > 0
    assert value(s, "sdtk_spec_steps_total", model="ensemble") == 16  # 32 drafts / 4 per step, twice


def test_monitor_stops_when_told():
    stop = threading.Event()
    client = FakeClient([_Resp()] * 1000)
    mon = Monitor("http://x", metrics=SpecMetrics(), interval=0.01, client=client)
    t = threading.Thread(target=mon.run, kwargs={"stop": stop})
    t.start()
    stop.set()
    t.join(timeout=5)
    assert not t.is_alive()
    with pytest.raises(Exception, match="interval"):
        Monitor("http://x", interval=0, client=client)


def test_probe_params_follow_the_model_inputs():
    assert monitor.probe_request_params({"text_input": "BYTES"}, 4) == {}
    assert monitor.probe_request_params(
        {"return_perf_metrics": "BOOL", "temperature": "FP32", "num_draft_tokens": "INT32"}, 4
    ) == {"return_perf_metrics": True, "temperature": 0.0, "num_draft_tokens": 4}


# --------------------------------------------------------------------------- Triton custom metrics (fake pb_utils)


class _FakeMetric:
    def __init__(self, family, labels, buckets):
        self.family, self.labels, self.buckets = family, labels, buckets
        self.total = 0.0
        self.observed = []

    def increment(self, v):
        self.total += v

    def observe(self, v):
        self.observed.append(v)


class _FakeFamily:
    COUNTER, GAUGE, HISTOGRAM = "counter", "gauge", "histogram"
    created: list = []

    def __init__(self, name, description, kind):
        self.name, self.description, self.kind = name, description, kind
        self.metrics = []
        _FakeFamily.created.append(self)

    def Metric(self, labels, buckets=None):  # noqa: N802 - pb_utils' spelling
        m = _FakeMetric(self, labels, buckets)
        self.metrics.append(m)
        return m


class _FakePbUtils:
    MetricFamily = _FakeFamily


def test_triton_sink_declares_the_same_families():
    _FakeFamily.created = []
    sink = sm.TritonSpecMetrics(_FakePbUtils, model="tensorrt_llm")
    declared = {f.name: f.kind for f in _FakeFamily.created}
    assert declared == {f.name: f.kind for f in sm.FAMILIES}
    assert all(m.labels == {"model": "tensorrt_llm"} for f in _FakeFamily.created for m in f.metrics)
    sink.observe(accepted=6, drafted=8, output_tokens=9, steps=3)
    fams = {f.name: f for f in _FakeFamily.created}
    assert fams["sdtk_spec_accepted_tokens_total"].metrics[0].total == 6
    assert fams["sdtk_spec_requests_total"].metrics[0].total == 1
    assert fams["sdtk_spec_acceptance_rate"].metrics[0].observed == [0.75]
    assert fams["sdtk_spec_acceptance_length"].metrics[0].observed == [3.0]
    assert fams["sdtk_spec_acceptance_rate"].metrics[0].buckets == list(sm.RATE_BUCKETS)


def test_triton_sink_without_histograms_keeps_the_counters():
    class OldFamily:  # a Triton whose Python backend predates histogram metrics
        COUNTER, GAUGE = "counter", "gauge"
        __init__ = _FakeFamily.__init__
        Metric = _FakeFamily.Metric

    class OldPb:
        MetricFamily = OldFamily

    _FakeFamily.created = []
    sink = sm.TritonSpecMetrics(OldPb, model="m")
    assert not sink.histograms
    assert {f.kind for f in _FakeFamily.created} == {"counter"}
    sink.observe(accepted=1, drafted=2)


def test_backend_sink_prefers_triton_and_falls_back_to_its_own_port():
    _FakeFamily.created = []
    assert isinstance(backend_sink("m", pb_utils=_FakePbUtils), sm.TritonSpecMetrics)
    sink = backend_sink("m", http_port=0, addr="127.0.0.1")
    try:
        sink.observe(accepted=3, drafted=4)
        s = scrape(sink.server.url)
        assert value(s, "sdtk_spec_accepted_tokens_total", model="m") == 3
    finally:
        sink.close()
    with pytest.raises(ValueError, match="http_port"):
        backend_sink("m")


@pytest.mark.parametrize(
    ("accepted", "drafted", "draft_len", "output_tokens", "steps"),
    [
        (24, 40, 4, 35, None),  # whole steps from drafts
        (4, 6, 4, 7, None),  # a short last step (BLS drafts min(k, remaining - 1)): 1.5 steps
        (5, 14, 3, 12, None),  # 4.67 steps: round() made it 5
        (6, 8, None, 9, 3),  # the server's own step count
        (0, 9, 3, 4, None),  # nothing accepted: τ is 1
    ],
)
def test_bench_and_monitor_agree_on_acceptance_length(accepted, drafted, draft_len, output_tokens, steps):
    """One formula (spec_metrics.acceptance_length): the bench report and the monitor's histogram
    give the same τ for the same request, also when drafts are not a multiple of draft_len."""
    from toolkit.bench.measure.metrics import RequestRecord, acceptance_length

    rec = RequestRecord(
        index=0,
        start=0.0,
        chunk_times=[0.1, 0.2],
        chunk_tokens=[1, output_tokens - 1],
        end=0.2,
        accepted_draft_tokens=accepted,
        draft_tokens=drafted,
        draft_len=draft_len,
        steps=steps,
    )
    tau, _ = acceptance_length(rec)
    obs = sm.Observation.of(
        accepted=accepted, drafted=drafted, output_tokens=output_tokens, steps=steps, draft_len=draft_len
    )
    expect_steps = steps if steps is not None else drafted / draft_len
    assert obs.steps == pytest.approx(expect_steps)
    assert tau == pytest.approx(obs.length) == pytest.approx(1 + accepted / expect_steps)


def test_spec_metrics_imports_no_monitor():
    """No runtime import cycle: spec_metrics is standard library only (a Triton model may copy it)."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(sm))
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not any(m.startswith("toolkit") for m in imported), imported
