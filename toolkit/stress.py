"""Mixed, concurrent traffic against a live deployment, and what it must not break.

Used three ways: `sdtk deploy` sends a short burst after validation (toolkit.validate.survive_burst),
the stress tests send a CI-sized run, and `scripts/bench.py run stress_served` sends hundreds of requests per
recipe.

The traffic (`KINDS`): HTTP `generate`, HTTP `generate_stream`, gRPC streaming, HTTP streams the
client abandons after the first chunk, gRPC streams it cancels, and malformed requests. The
checks, none of which relies on the code under test to count: every well-formed request
answers, malformed ones get a 4xx, no Python backend stub dies (pids read from /proc before and
after), and the server's resident memory after the run. Greedy texts are returned for the
caller to compare with an independent baseline (the in-process reference runtime).
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from toolkit.generate import run_generate
from toolkit.progress import Bars
from toolkit.server import procs
from toolkit.server.state import python_stubs

KINDS = ("http", "http_stream", "grpc_stream", "abandon", "cancel", "bad")
COMPLETE_KINDS = ("http", "http_stream", "grpc_stream")  # read to the end: their text is checked
CANCEL_TOKENS = 400  # a cancelled stream's budget: its cancellation lands far from its end (plan)
PROMPTS = (
    "def fibonacci(n):",
    "import os\n\n\ndef read_lines(path):",
    "class Stack:\n    def __init__(self):",
    "for i in range(10):",
    "def parse_args(argv):\n    ",
    "with open(path) as f:",
)


@dataclass
class Outcome:
    kind: str
    prompt: str
    max_tokens: int
    ok: bool  # answered as this kind should (a 4xx for `bad`, an early stop for abandon/cancel)
    text: str = ""  # the generated text (complete kinds only)
    status: int | None = None
    error: str | None = None
    seconds: float = 0.0


@dataclass
class StressReport:
    url: str
    model: str
    outcomes: list[Outcome] = field(default_factory=list)
    stubs_before: dict[str, list[int]] = field(default_factory=dict)
    stubs_after: dict[str, list[int]] = field(default_factory=dict)
    rss_before_mb: float | None = None
    rss_after_mb: float | None = None
    seconds: float = 0.0

    @property
    def failures(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.ok]

    @property
    def stub_deaths(self) -> int:
        before = {p for pids in self.stubs_before.values() for p in pids}
        after = {p for pids in self.stubs_after.values() for p in pids}
        return len(before - after)

    def summary(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "model": self.model,
            "requests": len(self.outcomes),
            "by_kind": dict(Counter(o.kind for o in self.outcomes)),
            "failed": len(self.failures),
            "stub_deaths": self.stub_deaths,
            "rss_before_mb": self.rss_before_mb,
            "rss_after_mb": self.rss_after_mb,
            "seconds": round(self.seconds, 1),
            "first_failures": [asdict(o) for o in self.failures[:3]],
        }


def server_rss_mb(pgid: int) -> float:
    """Resident memory of a server's whole process group (tritonserver and its stubs), in MiB."""
    total = 0
    for pid in procs.group_members(pgid):
        try:
            for line in open(f"/proc/{pid}/status"):  # noqa: SIM115 - tiny proc file
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


class Traffic:
    """One client per request kind, talking to `http_url` / `grpc_url` with plain httpx and
    tritonclient.grpc (not sdtk's client: the traffic must not share the code it checks)."""

    def __init__(
        self,
        http_url: str,
        grpc_url: str,
        model: str,
        *,
        llmapi: bool = False,
        timeout: float = 300.0,
    ):
        self.http_url, self.grpc_url, self.model = http_url.rstrip("/"), grpc_url, model
        self.timeout = timeout
        # The llmapi model's inputs: sampling_param_*, `streaming`; its streamed text is cumulative.
        self.llmapi = llmapi
        self.max_key = "sampling_param_max_tokens" if llmapi else "max_tokens"
        self.stream_key = "streaming" if llmapi else "stream"

    def _body(self, prompt: str, max_tokens: int, stream: bool) -> dict[str, Any]:
        body: dict[str, Any] = {"text_input": prompt, self.max_key: max_tokens}
        # The completion only: the deployment's default may keep the prompt (serving.exclude_input_in_output).
        if self.llmapi:
            body["sampling_param_exclude_input_from_output"] = True
        else:
            body["exclude_input_in_output"] = True
        if stream:
            body[self.stream_key] = True
        return body

    def _joined(self, texts: list[str]) -> str:
        return (texts[-1] if texts else "") if self.llmapi else "".join(texts)

    def send(self, kind: str, prompt: str, max_tokens: int) -> Outcome:
        t0 = time.monotonic()
        out = Outcome(kind, prompt, max_tokens, ok=False)
        try:
            getattr(self, "_" + kind)(out)
        except Exception as e:  # every failure is data here
            out.error = f"{type(e).__name__}: {e}"[:300]
        out.seconds = time.monotonic() - t0
        return out

    def _http(self, out: Outcome) -> None:
        import httpx

        r = httpx.post(
            f"{self.http_url}/v2/models/{self.model}/generate",
            json=self._body(out.prompt, out.max_tokens, False),
            timeout=self.timeout,
        )
        out.status = r.status_code
        if r.status_code != 200:
            out.error = r.text[:300]
            return
        out.text, out.ok = r.json()["text_output"], True

    def _sse(self, out: Outcome, stop_after: int | None) -> None:
        import httpx

        texts = []
        with (
            httpx.Client(timeout=self.timeout) as c,
            c.stream(
                "POST",
                f"{self.http_url}/v2/models/{self.model}/generate_stream",
                json=self._body(out.prompt, out.max_tokens, True),
            ) as r,
        ):
            out.status = r.status_code
            for line in r.iter_lines():
                if not line.startswith("data:"):
                    continue
                event = json.loads(line[5:])
                if "error" in event:
                    out.error = str(event["error"])[:300]
                    return
                texts.append(event.get("text_output", ""))
                if stop_after is not None and len(texts) >= stop_after:
                    out.ok = True  # the client leaves; the server must stop and stay healthy
                    return
        if out.status != 200:
            out.error = f"HTTP {out.status}"
            return
        out.text, out.ok = self._joined(texts), True

    def _http_stream(self, out: Outcome) -> None:
        self._sse(out, None)

    def _abandon(self, out: Outcome) -> None:
        self._sse(out, 1)

    def _grpc(self, out: Outcome, cancel_after: int | None) -> None:
        import queue

        import numpy as np
        import tritonclient.grpc as grpcclient

        def tensor(name: str, value: np.ndarray, dtype: str) -> Any:
            t = grpcclient.InferInput(name, list(value.shape), dtype)
            t.set_data_from_numpy(value)
            return t

        results: queue.Queue = queue.Queue()
        client = grpcclient.InferenceServerClient(self.grpc_url)
        try:
            client.start_stream(callback=lambda result, error: results.put((result, error)))
            shape = (1,) if self.llmapi else (1, 1)  # the llmapi model has max_batch_size 0
            inputs = [
                tensor("text_input", np.array([out.prompt.encode()], dtype=object).reshape(shape), "BYTES"),
                tensor(self.max_key, np.array([out.max_tokens], dtype=np.int32).reshape(shape), "INT32"),
                tensor(self.stream_key, np.array([True], dtype=bool).reshape(shape), "BOOL"),
            ]
            if self.llmapi:
                inputs.append(
                    tensor("sampling_param_exclude_input_from_output", np.array([True], dtype=bool), "BOOL")
                )
            client.async_stream_infer(self.model, inputs, enable_empty_final_response=True)
            texts = []
            while True:
                result, error = results.get(timeout=self.timeout)
                if error is not None:
                    out.error = str(error)[:300]
                    return
                final = result.get_response().parameters.get("triton_final_response")
                text = result.as_numpy("text_output")
                if text is not None and text.size:
                    texts.append(text.reshape(-1)[0].decode())
                if final is not None and final.bool_param:
                    break
                if cancel_after is not None and len(texts) >= cancel_after:
                    client.stop_stream(cancel_requests=True)  # mid-stream: the model must stop
                    out.ok = True
                    return
            out.text, out.ok = self._joined(texts), True
        finally:
            # Cancel only a stream still running, as sdtk's own client does. Cancelling one whose
            # final response has arrived races the server's own clean-up, a race that can crash
            # Triton <= 24.12 (server PR #7840, fixed in 25.01; #8078 in 25.04), not our models.
            client.stop_stream(cancel_requests=not out.ok)
            client.close()

    def _grpc_stream(self, out: Outcome) -> None:
        self._grpc(out, None)

    def _cancel(self, out: Outcome) -> None:
        self._grpc(out, 1)

    def _bad(self, out: Outcome) -> None:
        import httpx

        # A required input missing: the server must refuse it with a 4xx and keep serving.
        r = httpx.post(
            f"{self.http_url}/v2/models/{self.model}/generate",
            json={self.max_key: out.max_tokens},
            timeout=self.timeout,
        )
        out.status = r.status_code
        out.ok = 400 <= r.status_code < 500
        if not out.ok:
            out.error = f"expected a 4xx, got HTTP {r.status_code}: {r.text[:200]}"


def plan(
    n: int,
    *,
    seed: int = 0,
    kinds: Sequence[str] = KINDS,
    max_tokens: Sequence[int] = (16, 48),
    cancel_tokens: int = CANCEL_TOKENS,
):
    """`n` (kind, prompt, max_tokens) requests, every kind in turn, prompts and lengths drawn.

    A `cancel` asks for `cancel_tokens`, so that its cancellation (after the first chunk) lands
    mid-generation, far from the stream's own end: in Triton <= 24.12 (2.51 embedded) a client's
    cancellation that meets a stream's final response can crash the whole server in its gRPC
    stream handler (server PRs #7840, #8078; seen once in CI with a 16-token stream). The draws
    are the same as without it, so every other request is unchanged."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        kind, prompt, tokens = kinds[i % len(kinds)], rng.choice(PROMPTS), rng.choice(list(max_tokens))
        out.append((kind, prompt, cancel_tokens if kind == "cancel" else tokens))
    return out


def run(
    traffic: Traffic,
    requests: Sequence[tuple[str, str, int]],
    *,
    concurrency: int,
    pgid: int | None = None,
    warmup: int = 0,
    progress: bool = False,
) -> StressReport:
    """Send `requests` with up to `concurrency` in flight; stub pids and RSS (when `pgid`, the
    server's process group, is known) before and after. `progress`: a rich bar on stderr."""
    report = StressReport(traffic.http_url, traffic.model)
    for i in range(warmup):  # RSS is measured after the caches and allocators have warmed up
        traffic.send("http", PROMPTS[i % len(PROMPTS)], 16)
    if pgid is not None:
        report.stubs_before = python_stubs(pgid)
        report.rss_before_mb = round(server_rss_mb(pgid), 1)
    errors = [0]
    lock = threading.Lock()

    def one(req: tuple[str, str, int]) -> Outcome:
        outcome = traffic.send(*req)
        with lock:
            errors[0] += 0 if outcome.ok else 1
            bars.advance(errors[0])
        return outcome

    t0 = time.monotonic()
    with Bars(progress, "stress") as bars, ThreadPoolExecutor(max_workers=concurrency) as pool:
        bars.level(f"c={concurrency}", len(requests))
        report.outcomes = list(pool.map(one, requests))
    report.seconds = time.monotonic() - t0
    if pgid is not None:
        time.sleep(0.5)  # let cancelled work wind down before reading memory
        report.stubs_after = python_stubs(pgid)
        report.rss_after_mb = round(server_rss_mb(pgid), 1)
    return report


def baseline_texts(recipe: Any, requests: Sequence[tuple[str, str, int]]) -> dict[tuple[str, int], str]:
    """The target's greedy text for every (prompt, max_tokens) of `requests`, from the in-process
    reference runtime with speculation off: the yardstick for served outputs."""
    out: dict[tuple[str, int], str] = {}
    for _, prompt, max_tokens in requests:
        if (prompt, max_tokens) not in out:
            out[prompt, max_tokens] = run_generate(recipe, prompt, max_tokens, no_speculation=True)["text"]
    return out


def mismatches(report: StressReport, want: dict[tuple[str, int], str]) -> list[Outcome]:
    """Completed requests whose text differs from the baseline."""
    return [
        o
        for o in report.outcomes
        if o.ok and o.kind in COMPLETE_KINDS and o.text != want[o.prompt, o.max_tokens]
    ]
