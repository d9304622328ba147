"""Dynamo 1.6.1's KV router in front of two of sdtk's reference workers that publish KV events
(`--router-mode kv`, ZMQ event plane, file discovery: no NATS, no etcd), for real.

While a long request with a ~430-token prompt streams on one worker (its prompt blocks are
stored there), requests that share that prompt as a prefix are routed to the same worker and a
request with another prompt to the other one. Which worker served what is read from each worker's
own sdtk_spec_requests_total, which grows by one when a request ends there.
"""

from __future__ import annotations

import importlib.util
import json
import threading
import time
from pathlib import Path

import pytest
from cli_support import sdtk

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("dynamo.frontend") is None,
        reason="ai-dynamo is not installed (scripts/setup_env.sh installs it; SDTK_DYNAMO=0 skips it)",
    ),
]

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "tiny-baseline.yaml"
SHARED = "def fibonacci(n):\n    " + " ".join(
    f"value_{i} = compute(value_{i - 1}, {i})" for i in range(1, 40)
)
OTHER = "class Stack:\n    " + " ".join(f"item_{i} = pop(item_{i - 1}, {i})" for i in range(1, 40))


def served(processes: dict) -> dict[str, float]:
    import httpx

    return {
        name: sum(
            float(line.rsplit(" ", 1)[1])
            for line in httpx.get(p["metrics_url"], timeout=10).text.splitlines()
            if line.startswith("sdtk_spec_requests_total{")
        )
        for name, p in processes.items()
        if p.get("metrics_url")
    }


@pytest.mark.alone  # the long request must outlast three routed ones: other tests' load beside it stretches those past its end
def test_requests_sharing_a_prefix_land_on_the_worker_that_holds_it(tmp_path):
    import httpx

    workdir = tmp_path / "wd"
    r = sdtk(
        "deploy", str(RECIPE), "--target", "dynamo", "--workers", "2", "--router-mode", "kv", "--detach",
        "--auto-ports", "--no-validate", "--workdir", str(workdir), "--json",
    )  # fmt: skip
    root = workdir / "tiny-baseline"
    try:
        assert r.returncode == 0, r.stderr[-3000:]
        ready = json.loads(r.stdout)
        url, model = ready["http_url"], ready["model"]
        processes = json.loads((root / "dynamo" / "processes.json").read_text())
        plan = json.loads((root / "dynamo" / "plan.json").read_text())
        assert all("--publish-kv-events" in w["argv"] for w in plan["workers"])
        st = sdtk("status", "--workdir", str(root))
        assert "router kv" in st.stdout, st.stdout

        long: dict[str, float] = {}

        def stream_long() -> None:  # ignore_eos: it runs its 500 tokens, holding its blocks
            body = {"model": model, "prompt": SHARED, "max_tokens": 500, "ignore_eos": True, "stream": True}
            with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=600) as resp:
                for line in resp.iter_lines():
                    if line.startswith("data:"):
                        long.setdefault("first", time.monotonic())
            long["end"] = time.monotonic()

        def where(prompt: str) -> str:
            """The worker that served `prompt` (while the long request runs, only it ends)."""
            before = served(processes)
            resp = httpx.post(
                f"{url}/v1/completions", json={"model": model, "prompt": prompt, "max_tokens": 4}, timeout=120
            )
            assert resp.status_code == 200, resp.text
            grew = [n for n, v in served(processes).items() if v > before[n]]
            assert len(grew) == 1 and "end" not in long, (grew, long)  # the long one is still running
            return grew[0]

        start = served(processes)
        thread = threading.Thread(target=stream_long)
        thread.start()
        deadline = time.monotonic() + 120
        while "first" not in long and "end" not in long and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # its KV events reach the router over the ZMQ event plane
        picks = [where(SHARED + " tail_one"), where(OTHER), where(SHARED + " tail_two")]
        mid = served(processes)
        thread.join(timeout=600)
        assert "end" in long
        holder = [n for n, v in served(processes).items() if v > mid[n]]
        assert len(holder) == 1, (start, mid)
        other = next(n for n in processes if n != holder[0] and n != "frontend")
        assert picks == [holder[0], other, holder[0]]
    finally:
        stop = sdtk("stop", "--workdir", str(root))
    assert stop.returncode == 0, stop.stderr
