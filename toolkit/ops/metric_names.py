"""Prometheus metric families a Triton + TensorRT-LLM deployment can export, and sdtk's own.

Used to check that dashboards and alert rules only reference metrics that exist.

Sources:
- TRITON_OBSERVED: read off /metrics of the Triton 2.51 server embedded in nvidia-pytriton (a
  Python-backend model, one successful and one failed request, `--metrics-config
  summary_latencies=true`); tests/ops/test_triton_live.py re-checks them against that server.
- TRITON_GPU and TRITON_CACHE: Triton docs/user_guide/metrics.md (triton-inference-server/server
  @067c1e9), "GPU Metrics" (DCGM; absent on CPU-only servers) and "Response Cache Metrics".
- TRTLLM: the TensorRT-LLM backend's custom_metrics_reporter.cc (triton-inference-server/
  tensorrtllm_backend @c2e65b8; NVIDIA/TensorRT-LLM triton_backend/ @0d5352f): engine backend only; no
  speculative-decoding family.
- SDTK: toolkit.ops.spec_metrics, toolkit.ops.monitor and toolkit.ops.batch_metrics (the
  reference backend also exports nv_trt_llm_request_metrics and nv_trt_llm_general_metrics).
"""

from __future__ import annotations

TRITON_OBSERVED: dict[str, str] = {
    "nv_inference_request_success": "counter",
    "nv_inference_request_failure": "counter",
    "nv_inference_count": "counter",
    "nv_inference_exec_count": "counter",
    "nv_inference_request_duration_us": "counter",
    "nv_inference_queue_duration_us": "counter",
    "nv_inference_compute_input_duration_us": "counter",
    "nv_inference_compute_infer_duration_us": "counter",
    "nv_inference_compute_output_duration_us": "counter",
    "nv_inference_pending_request_count": "gauge",
    "nv_pinned_memory_pool_total_bytes": "gauge",
    "nv_pinned_memory_pool_used_bytes": "gauge",
    "nv_cpu_utilization": "gauge",
    "nv_cpu_memory_total_bytes": "gauge",
    "nv_cpu_memory_used_bytes": "gauge",
    "nv_inference_request_summary_us": "summary",
    "nv_inference_queue_summary_us": "summary",
    "nv_inference_compute_input_summary_us": "summary",
    "nv_inference_compute_infer_summary_us": "summary",
    "nv_inference_compute_output_summary_us": "summary",
}

TRITON_GPU: dict[str, str] = {
    "nv_gpu_utilization": "gauge",
    "nv_gpu_memory_total_bytes": "gauge",
    "nv_gpu_memory_used_bytes": "gauge",
    "nv_gpu_power_usage": "gauge",
    "nv_gpu_power_limit": "gauge",
    "nv_energy_consumption": "counter",
}

TRITON_CACHE: dict[str, str] = {
    "nv_cache_num_hits_per_model": "counter",
    "nv_cache_num_misses_per_model": "counter",
    "nv_cache_hit_duration_per_model": "counter",
    "nv_cache_miss_duration_per_model": "counter",
}

TRTLLM: dict[str, str] = {
    "nv_trt_llm_request_metrics": "gauge",
    "nv_trt_llm_runtime_memory_metrics": "gauge",
    "nv_trt_llm_kv_cache_block_metrics": "gauge",
    "nv_trt_llm_disaggregated_serving_metrics": "counter",
    "nv_trt_llm_inflight_batcher_metrics": "gauge",
    "nv_trt_llm_v1_metrics": "gauge",
    "nv_trt_llm_general_metrics": "gauge",
    "nv_llm_input_token_len": "histogram",
    "nv_llm_output_token_len": "histogram",
}

# Labels that select within the TRT-LLM families (reference doc §4 table).
TRTLLM_LABELS: dict[str, tuple[str, tuple[str, ...]]] = {
    "nv_trt_llm_request_metrics": ("request_type", ("active", "max", "scheduled", "context", "waiting")),
    "nv_trt_llm_runtime_memory_metrics": ("memory_type", ("cpu", "gpu", "pinned")),
    "nv_trt_llm_kv_cache_block_metrics": (
        "kv_cache_block_type",
        ("max", "free", "used", "tokens_per", "reused", "fraction"),
    ),
    "nv_trt_llm_inflight_batcher_metrics": (
        "inflight_batcher_specific_metric",
        ("total_context_tokens", "generation_requests", "micro_batch_id", "paused_requests"),
    ),
    "nv_trt_llm_general_metrics": ("general_type", ("timestamp", "iteration_counter")),
}


def sdtk_families() -> dict[str, str]:
    from toolkit.ops import spec_metrics as sm
    from toolkit.ops.batch_metrics import PEAK
    from toolkit.ops.monitor import PROBE_FAMILIES

    return {PEAK: "gauge", **{f.name: f.kind for f in (*sm.FAMILIES, *PROBE_FAMILIES)}}


def known_families() -> dict[str, str]:
    """Every family name -> type (counter names as exposed, i.e. ending in _total for sdtk's)."""
    return {**TRITON_OBSERVED, **TRITON_GPU, **TRITON_CACHE, **TRTLLM, **sdtk_families()}


_SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count")}


def known_series() -> set[str]:
    """Every series name that can appear in PromQL: families plus histogram/summary suffixes."""
    out: set[str] = set()
    for name, kind in known_families().items():
        out.add(name)
        out.update(name + s for s in _SUFFIXES.get(kind, ()))
    return out


def family_of(series: str) -> str | None:
    """The family a series name belongs to, or None if unknown."""
    fams = known_families()
    if series in fams:
        return series
    for name, kind in fams.items():
        if any(series == name + s for s in _SUFFIXES.get(kind, ())):
            return name
    return None
