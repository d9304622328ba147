"""Every tiny recipe, served on the embedded Triton, under mixed concurrent traffic.

CI-sized: 30 requests per recipe at concurrency 4, every kind of toolkit.stress.KINDS (HTTP
generate and generate_stream, gRPC streaming, abandoned HTTP streams, cancelled gRPC streams,
malformed requests). Checked against yardsticks the served code does not compute: stub pids read
from /proc before and after, and every completed greedy text against the in-process reference
runtime with speculation off. `scripts/bench.py run stress_served` runs the long version (≥ 300 requests
per recipe, memory included).
"""

from __future__ import annotations

import pytest

from tests.stress.conftest import diagnosis
from toolkit import stress

pytestmark = [pytest.mark.tritonserver, pytest.mark.slow]

TINY_RECIPES = (
    "tiny-baseline",
    "tiny-draft-target",
    "tiny-eagle3",
    "tiny-medusa",
    "tiny-lookahead",
    "tiny-ngram",
    "tiny-eagle3-llmapi",
    "tiny-ngram-llmapi",
)


@pytest.mark.parametrize("served", TINY_RECIPES, indirect=True)
def test_mixed_traffic(served):
    """On the deployment the bench yardstick and replay tests share (tests/conftest.py `served`)."""
    recipe, result = served
    # A model that is not decoupled (draft-target's BLS, as on the GPU path) takes whole requests only.
    kinds = stress.KINDS if result.decoupled else ("http", "bad")
    requests = stress.plan(30, seed=1, kinds=kinds)
    traffic = stress.Traffic(
        result.http_url,
        result.grpc_url,
        result.model,
        llmapi=result.entry_kind == "llmapi",
    )
    report = stress.run(traffic, requests, concurrency=4, pgid=result.pid, warmup=2)
    assert report.failures == [], f"{report.summary()}\n{diagnosis(result)}"
    assert report.stub_deaths == 0 and report.stubs_after == report.stubs_before
    assert "tensorrt_llm" in report.stubs_before
    complete = [o for o in report.outcomes if o.kind in stress.COMPLETE_KINDS]
    assert len(complete) >= 15
    assert stress.mismatches(report, stress.baseline_texts(recipe, requests)) == []
