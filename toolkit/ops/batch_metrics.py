"""The reference runtime's in-flight batching on Triton's /metrics, under the names TensorRT-LLM's
backend uses (inflight_batcher_llm/src/custom_metrics_reporter/custom_metrics_reporter.cc,
triton-inference-server/tensorrtllm_backend @c2e65b8), so the
same dashboards, alerts and HPA metric (`request_type="waiting"`) work on a CPU deployment:

- `nv_trt_llm_request_metrics{request_type=active|max|scheduled|context|waiting}`;
- `nv_trt_llm_general_metrics{general_type="iteration_counter"}`;
- `sdtk_reference_batch_size_max`: the largest batch one iteration has run since load, sdtk's own
  (upstream has none), so a client can tell that requests really shared a forward.

The batcher's state is copied every `period_s`: one IPC round trip per changed gauge, never one per
iteration on the batching path. By a sampler thread of its own, or (`thread=False`) by whoever
calls `flush()` every `period` seconds: the reference model makes every custom-metric call from
one thread, since concurrent ones crash tritonserver 2.51.
"""

from __future__ import annotations

import threading
from typing import Any

REQUEST_TYPES = ("active", "max", "scheduled", "context", "waiting")
PEAK = "sdtk_reference_batch_size_max"
PEAK_HELP = "Largest number of sequences one in-flight batching iteration has run since the model loaded"


class BatchMetrics:
    def __init__(
        self, pb_utils: Any, *, model: str, batcher: Any, period_s: float = 0.25, thread: bool = True
    ):
        mf = pb_utils.MetricFamily
        self.batcher = batcher
        labels = {"model": model, "version": "1"}
        requests = mf(
            name="nv_trt_llm_request_metrics",
            description="TRT-LLM request metrics (sdtk reference backend)",
            kind=mf.GAUGE,
        )
        general = mf(
            name="nv_trt_llm_general_metrics",
            description="General TRT-LLM metrics (sdtk reference backend)",
            kind=mf.GAUGE,
        )
        peak = mf(name=PEAK, description=PEAK_HELP, kind=mf.GAUGE)
        # Hold the family objects: the Python backend deletes a family when its object is freed.
        self._families = [requests, general, peak]
        self._gauges: dict[str, Any] = {
            **{t: requests.Metric(labels={**labels, "request_type": t}) for t in REQUEST_TYPES},
            "iteration_counter": general.Metric(labels={**labels, "general_type": "iteration_counter"}),
            PEAK: peak.Metric(labels={"model": model}),
        }
        self._last: dict[str, float] = {}
        self.period = period_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if thread:
            self._thread = threading.Thread(target=self._run, name="sdtk-batch-metrics", daemon=True)
            self._thread.start()

    def sample(self) -> dict[str, float]:
        b = self.batcher
        return {
            "active": b.active,
            "max": b.max_batch_size,
            "scheduled": b.last_scheduled,
            "context": b.last_context,
            "waiting": b.waiting,
            "iteration_counter": b.iterations,
            PEAK: b.peak,
        }

    def flush(self) -> None:
        for name, value in self.sample().items():
            if self._last.get(name) != value:
                self._gauges[name].set(float(value))
                self._last[name] = value

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            self.flush()

    def close(self) -> None:
        """Stop sampling and free the metric objects (from the model's `finalize`, while the stub
        can still talk to the server)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        self._gauges.clear()
        self._families.clear()
