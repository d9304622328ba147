"""Against the REAL embedded Triton (nvidia-pytriton 2.51, Python backend): sdtk doctor --url, the
sdtk_spec_* families on Triton's own metrics port (pb_utils.MetricFamily), the exporter after
real traffic, and the known-metric list. Skipped, with the reason, when the server is absent."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import urllib.request

import pytest

from toolkit.ops import metric_names

pytestmark = [pytest.mark.tritonserver, pytest.mark.slow]

pc = pytest.importorskip("prometheus_client", reason="prometheus-client (a dependency of sdtk) is not installed")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402


def families(url: str) -> dict[str, object]:
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def sample(fams: dict, family: str, name: str, **labels) -> float:
    """A sample value (0.0 when absent). prometheus_client names counter families without _total."""
    fam = fams.get(family) or fams.get(family.removesuffix("_total"))
    if fam is None:
        return 0.0
    for s in fam.samples:
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    return 0.0


def test_doctor_against_real_triton(live_triton):
    from toolkit.ops.health import SpeculationProbe, check_deployment

    report = check_deployment(
        live_triton.http_url, "spec", metrics_url=live_triton.metrics_url, probe=SpeculationProbe(draft_len=4)
    )
    assert report.ok, report.to_dict()
    assert report.verdict.startswith("HEALTHY") and "speculation active" in report.verdict
    spec = report.speculation
    assert spec["accepted"] > 0 and spec["drafted"] > spec["accepted"] and spec["acceptance_length"] > 1
    assert "sdtk_spec_*" in report.check("metrics").detail

    baseline = check_deployment(live_triton.http_url, "baseline", metrics_url=live_triton.metrics_url)
    assert not baseline.ok and baseline.check("speculation").value == "inactive"


def test_backend_publishes_spec_counters_on_tritons_metrics_port(live_triton):
    from toolkit.client import TritonClient

    before = families(live_triton.metrics_url)
    n = 3
    with TritonClient(live_triton.http_url, model="spec") as client:
        for _ in range(n):
            r = client.generate("one two three four", 12, return_perf_metrics=True)
            assert r.total_accepted_draft_tokens == 8 and r.total_draft_tokens == 16  # 12 tokens, 4 steps
    after = families(live_triton.metrics_url)

    def delta(family, name, **labels):
        return sample(after, family, name, model="spec", **labels) - sample(
            before, family, name, model="spec", **labels
        )

    assert delta("sdtk_spec_accepted_tokens_total", "sdtk_spec_accepted_tokens_total") == 8 * n
    assert delta("sdtk_spec_draft_tokens_total", "sdtk_spec_draft_tokens_total") == 16 * n
    assert delta("sdtk_spec_requests_total", "sdtk_spec_requests_total") == n
    assert delta("sdtk_spec_acceptance_rate", "sdtk_spec_acceptance_rate_count") == n
    assert delta("sdtk_spec_acceptance_length", "sdtk_spec_acceptance_length_sum") == pytest.approx(3.0 * n)


def test_exporter_publishes_nonzero_acceptance_after_real_traffic(live_triton):
    from toolkit.ops.monitor import Monitor, ProbeRequest, SpecMetrics, run_monitor

    metrics = SpecMetrics()
    request = ProbeRequest(max_tokens=9, draft_len=4)
    mon = Monitor(live_triton.http_url, model="spec", metrics=metrics, interval=0.05, request=request)
    with metrics.serve(port=0, addr="127.0.0.1") as server:
        assert mon.run(iterations=3) == 3
        fams = families(server.url)
    mon.close()
    assert (
        sample(fams, "sdtk_spec_accepted_tokens_total", "sdtk_spec_accepted_tokens_total", model="spec") == 18
    )
    assert sample(fams, "sdtk_spec_draft_tokens_total", "sdtk_spec_draft_tokens_total", model="spec") == 36
    assert sample(fams, "sdtk_spec_acceptance_length", "sdtk_spec_acceptance_length_count", model="spec") == 3
    assert (
        sample(fams, "sdtk_spec_probe_latency_seconds", "sdtk_spec_probe_latency_seconds", model="spec") > 0
    )
    assert sample(fams, "sdtk_spec_probe_errors_total", "sdtk_spec_probe_errors_total", model="spec") == 0

    # `sdtk monitor` end to end: serve, probe twice, scrape while it runs.
    seen = {}

    def on_start(srv):
        seen["url"] = srv.url

    def on_probe(result):
        assert result.ok, result.error
        seen["fams"] = families(seen["url"])

    monitor = Monitor(live_triton.http_url, model="spec", interval=0.05)
    assert run_monitor(monitor, port=0, addr="127.0.0.1", iterations=2, on_start=on_start, on_probe=on_probe) == 2
    assert (
        sample(
            seen["fams"], "sdtk_spec_accepted_tokens_total", "sdtk_spec_accepted_tokens_total", model="spec"
        )
        > 0
    )


def test_known_metric_names_match_the_real_server(live_triton):
    text = urllib.request.urlopen(live_triton.metrics_url, timeout=10).read().decode()
    types = dict(line.split()[2:4] for line in text.splitlines() if line.startswith("# TYPE "))
    known = metric_names.known_families()
    for name, kind in types.items():
        assert name in known, f"{name} is exported by Triton but missing from toolkit.ops.metric_names"
        assert known[name] == kind, (name, kind)
    # The counters and latency families the dashboard relies on are really there.
    for required in ("nv_inference_request_success", "nv_inference_queue_duration_us", "nv_inference_count"):
        assert required in types


def _deploy_path_missing() -> str | None:
    if importlib.util.find_spec("torch") is None:
        return "the reference backend needs torch: pip install 'sdtk[reference]'"
    return None


@pytest.mark.parametrize("served", ["tiny-eagle3"], indirect=True)
def test_tiny_recipe_deployment_exports_acceptance(served, tmp_path):
    """A real tiny-eagle3 deployment (reference backend, CPU) probed by the exporter: the session's
    shared one (tests/conftest.py `served`, sdtk's deploy() detached; the probes only send traffic).
    `sdtk deploy tiny-eagle3` on the CLI, with validation, is tests/integration/test_deploy.py's;
    `sdtk build` of the recipe runs here."""
    why = _deploy_path_missing()
    if why:
        pytest.skip(why)
    from toolkit.client import TritonClient
    from toolkit.ops.monitor import Monitor, ProbeRequest, SpecMetrics

    sdtk = [sys.executable, "-m", "toolkit.cli"]
    env = {**os.environ, "SDTK_DEBUG": "1"}
    subprocess.run([*sdtk, "build", "tiny-eagle3", "--workdir", str(tmp_path / "work")], check=True, env=env,
                   timeout=900)  # fmt: skip
    _, deployment = served
    client = TritonClient.from_workdir(deployment.workdir)
    metrics = SpecMetrics()
    mon = Monitor(client.url, model=client.model, metrics=metrics, interval=0.05, client=client,
                  request=ProbeRequest(draft_len=3))  # fmt: skip
    assert all(r.ok for r in [mon.probe(), mon.probe()])
    text = metrics.exposition()
    accepted = [
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("sdtk_spec_accepted_tokens_total{")
    ]
    assert accepted and accepted[0] > 0, text
