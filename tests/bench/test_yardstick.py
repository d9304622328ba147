"""`sdtk bench` against an independent yardstick (sse_client.py) on the same live deployment,
for the entry model of every tiny recipe (real Triton, real tiny models, reference backend).

- Tokens per request: bench's count (the server's per-response num_output_tokens, summed; on
  the LLM-API model, which has no such output, the deployment's tokenizer over the cumulative
  text) must equal the target tokenizer's count of the text the yardstick received, over HTTP
  and gRPC. Greedy decoding makes the texts of the two runs identical.
- Mean TPOT over HTTP within 5%, on TPOT_RECIPES, in the serial pass (`alone`: in the parallel
  pass three other workers' servers moved the quotient below by up to 15% in one CI run): the timing (first and last chunk arrival) is
  the same code for every entry model, so one recipe per serving path carries it (the reference
  model, the LLM-API model counted by tokenizer; the BLS draft-target loop, which is not decoupled
  as on the GPU path, by its mean latency, since a whole response has no TPOT); the token
  counts it divides by are checked on every recipe above. The two clients cannot share requests,
  so their runs alternate in rounds of 3 requests on the same prompts (who goes first alternates
  too), and the yardstick sends bench's request flags (the server then does the same work; perf
  metrics alone cost the reference backend ~5-10%).
- The server's own timing of each request (its perf metrics: first and last token, arrival) is
  the common scale: each client's mean is divided by the server's mean over that client's own
  requests, and the two quotients must agree within 5%. On a shared 2-core machine the server's
  own speed differs between the two clients' turns: bench's raw mean was 6-9% above the
  client's in all three attempts of one CI run, and in local reruns the server's counters moved
  with the raw ratio attempt by attempt (1.010/1.011, 1.037/1.034, 0.988/0.991), so neither
  client's clock was at fault. Dividing by the server's timing leaves what the clients add: over
  12 local attempts the quotient was 0.997-1.007 while the raw ratio was 0.967-1.094. The raw
  ratio must still be within 15% (bench must not load the server more than a plain client
  does). One busy moment can still move a quotient, so a measurement is repeated (at most 3
  times) before the test fails, and the failure message shows every attempt's means.
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path

import pytest

from toolkit.bench.api import bench
from toolkit.bench.measure.metrics import request_metrics
from toolkit.bench.measure.workloads import load_workload

from .conftest import tritonserver_missing
from .sse_client import SSEClient

ROOT = Path(__file__).resolve().parents[2]
TINY = Path(os.environ.get("SDTK_TINY_MODELS") or ROOT / "models" / "tiny")
RECIPES = [
    "tiny-baseline",
    "tiny-draft-target",
    "tiny-eagle3",
    "tiny-medusa",
    "tiny-lookahead",
    "tiny-ngram",
    "tiny-eagle3-llmapi",
    "tiny-ngram-llmapi",
]
N, MAX_TOKENS, ATTEMPTS = 6, 48, 3
ROUNDS, PER_ROUND = 8, 3  # TPOT: bench and the client alternate every 3 requests
TPOT_RECIPES = ("tiny-draft-target", "tiny-eagle3", "tiny-eagle3-llmapi")

pytestmark = [pytest.mark.tritonserver, pytest.mark.slow]


@pytest.fixture(scope="module", autouse=True)
def _needs():
    missing = tritonserver_missing()
    if missing:
        pytest.skip(missing)
    assert (TINY / "target" / "config.json").is_file(), f"{TINY} is committed; the tiny target is missing"


def _bench(wd: Path, protocol: str, reports: Path, warmup: int = 1, n: int = N, source: str = "server"):
    r = bench(
        wd,
        protocol=protocol,
        workload="code",
        max_tokens=MAX_TOKENS,
        concurrency=[1],
        requests=n,
        warmup=warmup,
        report_dir=reports,
        progress=False,
    )
    assert not r.partial and r.token_counts_exact
    s = r.levels[0].summary()
    assert s["ok"] == n and s["token_count_source"] == source
    return r.levels[0].records, s


def _tpot_attempt(wd: Path, client: SSEClient, tmp_path: Path, source: str) -> dict[str, float]:
    """Mean TPOT of bench and of the client, each with the server's mean over its own requests
    (mean latency for a model that cannot stream)."""
    prompts = load_workload("code", max_tokens=MAX_TOKENS, seed=0).sample(PER_ROUND, 0)
    got: dict[str, list[float]] = {"bench": [], "bench_server": [], "client": [], "client_server": []}

    def run_bench(i: int) -> None:
        recs, _ = _bench(wd, "http", tmp_path / f"r{i}", warmup=0, n=PER_ROUND, source=source)
        for r in recs:
            m = request_metrics(r)
            if client.decoupled:
                got["bench"].append(m.tpot)
                first, last = r.server_first_token_ns, r.server_last_token_ns
                assert first is not None and last is not None, "bench kept no server timestamps"
                got["bench_server"].append((last - first) / 1e9 / (r.output_tokens - 1))
            else:
                assert m.tpot is None  # none exists for a whole response
                got["bench"].append(m.e2e)
                assert m.server_e2e is not None, "bench kept no server timestamps"
                got["bench_server"].append(m.server_e2e)

    def run_client() -> None:
        for p in prompts:
            m = client.run(p.text, p.max_tokens)
            got["client"].append(m.tpot if client.decoupled else m.e2e)
            got["client_server"].append(m.server_tpot if client.decoupled else m.server_e2e)

    for i in range(ROUNDS):
        if i % 2:
            run_client()
            run_bench(i)
        else:
            run_bench(i)
            run_client()
    return {k: statistics.mean(v) for k, v in got.items()}


def _relative(a: dict[str, float]) -> float:
    """bench's mean over the client's, each on the scale of the server's timing of its requests."""
    return (a["bench"] / a["bench_server"]) / (a["client"] / a["client_server"])


@pytest.mark.parametrize("served", RECIPES, indirect=True)
def test_bench_matches_independent_client(served, request, tmp_path):
    _, dep = served  # shared with the stress and replay tests of the same recipe
    recipe = request.node.callspec.params["served"]
    prompts = load_workload("code", max_tokens=MAX_TOKENS, seed=0).sample(N, 0)  # bench's order
    wd = dep.workdir
    client = SSEClient(dep.http_url, dep.model, str(TINY / "target"))
    client.run(prompts[0].text, 8)  # warm the connection path like bench's warm-up
    truth = [client.run(p.text, p.max_tokens) for p in prompts]
    assert all(m.tokens > 0 for m in truth)
    # The LLM-API model returns no token counts: bench counts with the deployment's tokenizer.
    llmapi = recipe.endswith("-llmapi")
    assert ("return_num_output_tokens" in client.inputs) is not llmapi
    source = "tokenizer" if llmapi else "server"
    for protocol in ("http", "grpc"):
        recs, s = _bench(wd, protocol, tmp_path / protocol, source=source)
        assert [r.index for r in recs] == list(range(N))
        assert [r.output_tokens for r in recs] == [m.tokens for m in truth], protocol
        if recipe != "tiny-baseline":  # bench asked for perf metrics under the model's input names
            assert s["acceptance"]["draft_tokens"] > 0, (protocol, s["acceptance"])


@pytest.mark.alone  # a client's clock under 3 other workers' load moves by 10% between turns
@pytest.mark.parametrize("served", TPOT_RECIPES, indirect=True)
def test_bench_tpot_matches_independent_client(served, request, tmp_path):
    _, dep = served
    recipe = request.node.callspec.params["served"]
    prompts = load_workload("code", max_tokens=MAX_TOKENS, seed=0).sample(N, 0)
    client = SSEClient(dep.http_url, dep.model, str(TINY / "target"))
    client.run(prompts[0].text, 8)  # warm the connection path like bench's warm-up
    source = "tokenizer" if recipe.endswith("-llmapi") else "server"
    attempts = []
    for _ in range(ATTEMPTS):
        a = _tpot_attempt(dep.workdir, client, tmp_path, source)
        attempts.append(a)
        if abs(_relative(a) - 1) <= 0.05:
            break
    shown = [
        {k: round(v * 1e3, 3) for k, v in a.items()} | {"relative": round(_relative(a), 3)} for a in attempts
    ]
    last = attempts[-1]
    assert abs(_relative(last) - 1) <= 0.05, f"{recipe}: mean TPOT (ms), bench vs client: {shown}"
    assert abs(last["bench"] / last["client"] - 1) <= 0.15, f"{recipe}: bench loads the server: {shown}"
