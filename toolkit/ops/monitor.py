"""`sdtk monitor`: a Prometheus exporter for speculative-decoding acceptance.

Triton exports no speculative-decoding metric (no `nv_trt_llm_spec*` family), but every request
that sets `return_perf_metrics` gets `acceptance_rate`, `total_accepted_draft_tokens` and
`total_draft_tokens` back. Two ways in:

- probing: `Monitor` sends one short prompt through `toolkit.client.TritonClient` every
  `interval` seconds and records what comes back (plus probe latency and errors);
- ingesting: code that already holds responses (bench, clients) records them through a sink,
  `default_metrics().sink(model).observe(accepted=..., drafted=..., ...)`, or
  `SpecMetrics.record(model, Observation.of_response(response))`.

Metric names and meanings are defined once in `toolkit.ops.spec_metrics` (the same names a Triton
Python model exports through `TritonSpecMetrics`). Probe families, exporter only:

| name | type | labels | meaning |
|---|---|---|---|
| sdtk_spec_probe_errors_total | counter | model, reason | failed probes; reason = unreachable / timeout / request / error |
| sdtk_spec_probe_latency_seconds | gauge | model | end-to-end latency of the last successful probe |
| sdtk_spec_last_probe_success_timestamp_seconds | gauge | model | unix time of the last successful probe (alert on staleness) |

Needs `prometheus-client` (the `ops` extra); imported when a SpecMetrics is created.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from toolkit.errors import SdtkError, ToolNotFound
from toolkit.ops import spec_metrics as sm

DEFAULT_PORT = 9400
DEFAULT_INTERVAL_S = 15.0
DEFAULT_PROMPT = "Write a short paragraph about the history of the printing press."
DEFAULT_MAX_TOKENS = 32

PROBE_ERRORS = sm.Family(f"{sm.PREFIX}probe_errors_total", "counter", "Failed acceptance probes")
PROBE_LATENCY = sm.Family(
    f"{sm.PREFIX}probe_latency_seconds", "gauge", "End-to-end latency of the last successful probe"
)
LAST_SUCCESS = sm.Family(
    f"{sm.PREFIX}last_probe_success_timestamp_seconds", "gauge", "Unix time of the last successful probe"
)
PROBE_FAMILIES = (PROBE_ERRORS, PROBE_LATENCY, LAST_SUCCESS)

# Every name the exporter can publish, as Prometheus exposes them (histograms add _bucket/_sum/_count).
EXPORTED_NAMES = tuple(f.name for f in (*sm.FAMILIES, *PROBE_FAMILIES))


def _prometheus() -> Any:
    try:
        import prometheus_client
    except ImportError:
        raise ToolNotFound(
            "prometheus-client",
            hint="pip install prometheus-client (a dependency of sdtk: reinstall sdtk)",
        ) from None
    return prometheus_client


class MetricsServer:
    """A running /metrics HTTP server; `close()` stops it."""

    def __init__(self, server: Any, thread: threading.Thread, addr: str):
        self._server = server
        self._thread = thread
        self.addr = addr

    @property
    def port(self) -> int:
        return int(self._server.server_port)

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.addr in ("", "0.0.0.0", "::") else self.addr
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SpecMetrics:
    """The sdtk_spec_* families in a prometheus-client registry of their own."""

    def __init__(self, registry: Any = None):
        pc = _prometheus()
        self.registry = registry if registry is not None else pc.CollectorRegistry()
        labels = list(sm.LABELS)
        self._counters: dict[str, Any] = {}
        self._hist: dict[str, Any] = {}
        for fam in sm.FAMILIES:
            if fam.kind == "counter":
                self._counters[fam.name] = pc.Counter(fam.name, fam.help, labels, registry=self.registry)
            else:
                self._hist[fam.name] = pc.Histogram(
                    fam.name, fam.help, labels, buckets=fam.buckets, registry=self.registry
                )
        self._probe_errors = pc.Counter(
            PROBE_ERRORS.name, PROBE_ERRORS.help, [*labels, "reason"], registry=self.registry
        )
        self._probe_latency = pc.Gauge(PROBE_LATENCY.name, PROBE_LATENCY.help, labels, registry=self.registry)
        self._last_success = pc.Gauge(LAST_SUCCESS.name, LAST_SUCCESS.help, labels, registry=self.registry)
        self._lock = threading.Lock()

    # -------------------------------------------------------------- recording

    def record(self, model: str, obs: sm.Observation) -> None:
        """Record one finished request of `model`."""
        with self._lock:
            for name, amount in obs.increments().items():
                self._counters[name].labels(model).inc(amount)
            if obs.rate is not None:
                self._hist[sm.ACCEPTANCE_RATE.name].labels(model).observe(obs.rate)
            if obs.length is not None:
                self._hist[sm.ACCEPTANCE_LENGTH.name].labels(model).observe(obs.length)

    def sink(self, model: str) -> ModelSink:
        """These metrics bound to `model`: `.observe(accepted=..., drafted=..., ...)`."""
        return ModelSink(self, model)

    def probe_failed(self, model: str, reason: str) -> None:
        self._probe_errors.labels(model, reason).inc()

    def probe_succeeded(self, model: str, latency_s: float) -> None:
        self._probe_latency.labels(model).set(latency_s)
        self._last_success.labels(model).set(time.time())

    # -------------------------------------------------------------- exposing

    def exposition(self) -> str:
        return _prometheus().generate_latest(self.registry).decode()

    def serve(self, port: int = DEFAULT_PORT, addr: str = "0.0.0.0") -> MetricsServer:
        """Serve /metrics on `addr:port` (port 0 = any free port) from a daemon thread."""
        pc = _prometheus()
        try:
            server, thread = pc.start_http_server(port, addr=addr, registry=self.registry)
        except OSError as e:
            raise SdtkError(
                f"cannot serve metrics on {addr}:{port}: {e.strerror or e}",
                hint="pick another --port (0 = any free port)",
            ) from None
        return MetricsServer(server, thread, addr)


_default: SpecMetrics | None = None
_default_lock = threading.Lock()


def default_metrics() -> SpecMetrics:
    """The process-wide SpecMetrics (`default_metrics().sink(model).observe(...)` records into it)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = SpecMetrics()
        return _default


class ModelSink(sm.Sink):
    """A SpecMetrics bound to one model, with the one `observe` signature of every sink."""

    def __init__(self, metrics: SpecMetrics, model: str):
        self.metrics = metrics
        self.model = model

    def record(self, obs: sm.Observation) -> None:
        self.metrics.record(self.model, obs)


# ------------------------------------------------------------------ probing


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    latency_s: float
    observation: sm.Observation | None = None
    error: str | None = None
    reason: str | None = None  # unreachable | timeout | request | error

    def to_dict(self) -> dict:
        obs = self.observation
        return {
            "ok": self.ok,
            "latency_s": round(self.latency_s, 4),
            "error": self.error,
            "reason": self.reason,
            "acceptance_rate": obs.rate if obs else None,
            "accepted": obs.accepted if obs else None,
            "drafted": obs.drafted if obs else None,
            "output_tokens": obs.output_tokens if obs else None,
        }


def error_reason(e: BaseException) -> str:
    from toolkit.client.errors import ClientError, ResponseTimeout, ServerUnreachable

    if isinstance(e, ServerUnreachable):
        return "unreachable"
    if isinstance(e, ResponseTimeout):
        return "timeout"
    if isinstance(e, ClientError | SdtkError):
        return "request"
    return "error"


def probe_request_params(inputs: dict[str, str], num_draft_tokens: int | None) -> dict[str, Any]:
    """Sampling parameters for a probe, limited to inputs the model has: greedy, perf metrics on."""
    params: dict[str, Any] = {}
    if "return_perf_metrics" in inputs:
        params["return_perf_metrics"] = True
    if "temperature" in inputs:
        params["temperature"] = 0.0
    if "num_draft_tokens" in inputs and num_draft_tokens:
        params["num_draft_tokens"] = num_draft_tokens
    return params


@dataclass(frozen=True)
class ProbeRequest:
    """The request a Monitor sends each time: `prompt`, `max_tokens`, the draft tokens per step to
    ask for (`num_draft_tokens`; None: the deployment's), and the deployment's draft length when
    known (`draft_len`, for the acceptance length)."""

    prompt: str = DEFAULT_PROMPT
    max_tokens: int = DEFAULT_MAX_TOKENS
    num_draft_tokens: int | None = 4
    draft_len: int | None = None


class Monitor:
    """Probe one model every `interval` seconds and record acceptance in `metrics`."""

    def __init__(
        self,
        url: str,
        *,
        model: str = "ensemble",
        metrics: SpecMetrics | None = None,
        interval: float = DEFAULT_INTERVAL_S,
        request: ProbeRequest = ProbeRequest(),
        protocol: str = "http",
        timeout: float = 60.0,
        client: Any = None,
    ):
        if interval <= 0:
            raise SdtkError(f"--interval must be > 0 seconds, got {interval}")
        self.url = url
        self.model = model
        self.metrics = metrics or SpecMetrics()
        self.interval = interval
        self.prompt = request.prompt
        self.max_tokens = request.max_tokens
        self.num_draft_tokens = request.num_draft_tokens
        self.draft_len = request.draft_len
        if client is None:
            from toolkit.client import TritonClient

            client = TritonClient(url, protocol=protocol, model=model, timeout=timeout)
        self.client = client

    def probe(self) -> ProbeResult:
        """One probe request; always returns (failures are counted, not raised)."""
        start = time.monotonic()
        try:
            info = self.client.model_info()
            params = probe_request_params(info.inputs, self.num_draft_tokens)
            resp = self.client.generate(self.prompt, self.max_tokens, **params)
        except Exception as e:  # noqa: BLE001 - a monitor keeps going; the error is counted
            reason = error_reason(e)
            self.metrics.probe_failed(self.model, reason)
            # The model config may change on redeploy: fetch it again next time.
            with contextlib.suppress(Exception):
                self.client.model_info(refresh=True)
            return ProbeResult(
                False, time.monotonic() - start, error=str(e) or type(e).__name__, reason=reason
            )
        latency = time.monotonic() - start
        self.metrics.probe_succeeded(self.model, latency)
        obs = sm.Observation.of_response(resp, draft_len=self.draft_len)
        self.metrics.record(self.model, obs)
        return ProbeResult(True, latency, obs)

    def run(
        self,
        stop: threading.Event | None = None,
        iterations: int | None = None,
        on_probe: Callable[[ProbeResult], None] | None = None,
    ) -> int:
        """Probe until `stop` is set (or `iterations` probes); returns the number of probes."""
        stop = stop or threading.Event()
        n = 0
        while not stop.is_set() and (iterations is None or n < iterations):
            started = time.monotonic()
            result = self.probe()
            n += 1
            if on_probe is not None:
                on_probe(result)
            if iterations is not None and n >= iterations:
                break
            stop.wait(max(0.0, self.interval - (time.monotonic() - started)))
        return n

    def close(self) -> None:
        close = getattr(self.client, "close", None)
        if close is not None:
            close()


def run_monitor(
    monitor: Monitor,
    *,
    port: int = DEFAULT_PORT,
    addr: str = "0.0.0.0",
    stop: threading.Event | None = None,
    iterations: int | None = None,
    on_start: Callable[[MetricsServer], None] | None = None,
    on_probe: Callable[[ProbeResult], None] | None = None,
) -> int:
    """`sdtk monitor`: serve the monitor's /metrics on `addr:port` and probe every `interval`
    seconds until `stop` is set (Ctrl-C in the CLI) or `iterations` probes ran; closes `monitor`."""
    server = monitor.metrics.serve(port, addr)
    try:
        if on_start is not None:
            on_start(server)
        return monitor.run(stop, iterations, on_probe)
    finally:
        monitor.close()
        server.close()


def backend_sink(
    model: str, *, pb_utils: Any = None, http_port: int | None = None, addr: str = "0.0.0.0"
) -> sm.Sink:
    """The sink a Triton Python model records acceptance into; `.observe(accepted=, drafted=, ...)`.

    Preferred: Triton's custom-metrics API (pass the `triton_python_backend_utils` module), so the
    families appear on Triton's own metrics port. Otherwise, with `http_port`, a prometheus-client
    server of its own (needs sdtk and prometheus-client importable in the model's Python).
    """
    if pb_utils is not None and hasattr(pb_utils, "MetricFamily"):
        return sm.TritonSpecMetrics(pb_utils, model=model)
    if http_port is None:
        raise ValueError(
            "backend_sink needs pb_utils with MetricFamily, or an http_port for its own exporter"
        )
    return _HttpSink(SpecMetrics(), model, http_port, addr)


class _HttpSink(ModelSink):
    """A model-bound SpecMetrics served on its own port (the fallback of `backend_sink`)."""

    def __init__(self, metrics: SpecMetrics, model: str, port: int, addr: str):
        super().__init__(metrics, model)
        self.server = metrics.serve(port, addr)

    def close(self) -> None:
        self.server.close()
