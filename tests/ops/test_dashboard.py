"""The Grafana dashboard loads and references only metrics that exist."""

from __future__ import annotations

import json
import re
from importlib import resources

import pytest

from toolkit.ops import metric_names

# PromQL words that are not metric names.
PROMQL_WORDS = {
    "sum", "max", "min", "avg", "count", "by", "without", "rate", "irate", "increase",
    "histogram_quantile", "clamp_min", "clamp_max", "time", "le", "on", "ignoring",
    "group_left", "group_right", "and", "or", "unless", "offset", "bool", "e",
}  # fmt: skip


def dashboard() -> dict:
    text = (resources.files("toolkit.ops") / "dashboards" / "sdtk-speculative.json").read_text()
    return json.loads(text)


def panels(d: dict) -> list[dict]:
    return [p for p in d["panels"] if p["type"] != "row"]


def exprs(d: dict) -> list[str]:
    return [t["expr"] for p in panels(d) for t in p["targets"]]


def metric_tokens(expr: str) -> set[str]:
    """Identifiers of an expression that can only be metric names."""
    s = re.sub(r"\{[^}]*\}", " ", expr)  # label matchers
    s = re.sub(r"\[[^\]]*\]", " ", s)  # range selectors
    s = re.sub(r"\b(by|without)\s*\([^)]*\)", " ", s)  # grouping labels
    s = re.sub(r"\b\d+(\.\d+)?(e[+-]?\d+)?\b", " ", s)  # numbers (1e-9, 1e6)
    words = set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", s))
    return words - PROMQL_WORDS


def matchers(expr: str) -> list[tuple[str, str, str]]:
    """(metric, label, value regex) for each `metric{label=~"..."}` matcher."""
    out = []
    for m in re.finditer(r"([A-Za-z_:][A-Za-z0-9_:]*)\{([^}]*)\}", expr):
        for lm in re.finditer(r'(\w+)\s*=~?\s*"([^"]*)"', m.group(2)):
            out.append((m.group(1), lm.group(1), lm.group(2)))
    return out


def test_dashboard_loads_and_is_importable():
    d = dashboard()
    assert d["uid"] == "sdtk-speculative" and d["title"]
    names = [v["name"] for v in d["templating"]["list"]]
    assert names == ["datasource", "model"]
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    for p in panels(d):
        assert p["datasource"]["uid"] == "${datasource}"
        assert p["targets"] and all(t["expr"] for t in p["targets"])
        assert p["gridPos"]["w"] <= 24


def test_every_metric_in_the_dashboard_exists():
    known = metric_names.known_series()
    used = set()
    for e in exprs(dashboard()):
        tokens = metric_tokens(e)
        assert tokens, e
        unknown = tokens - known
        assert not unknown, f"unknown metric(s) {sorted(unknown)} in: {e}"
        used |= tokens
    # The panels the runbooks point at: latency, queue, throughput, errors, GPU, acceptance.
    families = {metric_names.family_of(u) for u in used}
    for required in (
        "nv_inference_request_success",
        "nv_inference_request_failure",
        "nv_inference_request_duration_us",
        "nv_inference_queue_duration_us",
        "nv_inference_compute_infer_duration_us",
        "nv_inference_count",
        "nv_inference_pending_request_count",
        "nv_gpu_utilization",
        "nv_gpu_memory_used_bytes",
        "nv_trt_llm_request_metrics",
        "sdtk_spec_accepted_tokens_total",
        "sdtk_spec_draft_tokens_total",
        "sdtk_spec_acceptance_rate",
        "sdtk_spec_acceptance_length",
        "sdtk_spec_probe_errors_total",
    ):
        assert required in families, required


def test_label_selectors_use_real_label_values():
    for e in exprs(dashboard()):
        for metric, label, regex in matchers(e):
            if label == "model":
                assert regex == "$model"
                continue
            fam = metric_names.family_of(metric)
            assert fam in metric_names.TRTLLM_LABELS, (metric, label)
            want_label, values = metric_names.TRTLLM_LABELS[fam]
            assert label == want_label, (metric, label)
            for v in regex.split("|"):
                assert v in values, (metric, v)


@pytest.mark.parametrize(
    ("expr", "tokens"),
    [
        (
            'sum by (model) (rate(nv_inference_count{model=~"$model"}[$__rate_interval]))',
            {"nv_inference_count"},
        ),
        (
            "histogram_quantile(0.5, sum by (le) (rate(sdtk_spec_acceptance_rate_bucket[5m])))",
            {"sdtk_spec_acceptance_rate_bucket"},
        ),
        ("a / clamp_min(b, 1e-9) / 1e6", {"a", "b"}),
    ],
)
def test_metric_token_extraction(expr, tokens):
    assert metric_tokens(expr) == tokens


def test_unknown_metric_is_caught():
    assert metric_tokens("rate(nv_inference_sucess[5m])") - metric_names.known_series() == {
        "nv_inference_sucess"
    }
