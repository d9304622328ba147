"""A deliberately separate, minimal yardstick for `sdtk bench`: raw HTTP generate_stream.

Written from the protocol, not from toolkit: the standard library's http.client sends one
POST to /v2/models/<model>/generate_stream and reads the server-sent events line by line;
the target's tokenizer counts the tokens of the whole returned text. It never imports
toolkit (in particular not toolkit.bench), so a bug there cannot hide here.

The request carries the same flags as bench's (so the server does the same work); only
`text_output` and the server's own timestamps (`arrival_time_ns`, `first_token_time_ns`,
`last_token_time_ns`, the perf metrics both request) are read. Two request contracts, told
apart by the inputs the model declares: the ensemble / BLS / tensorrt_llm one (`max_tokens`,
`stream`; each event carries its new text) and TensorRT-LLM's LLM-API model
(`sampling_param_max_tokens`, `streaming`; each event carries the whole text so far,
tensorrtllm_backend docs/llmapi.md).
Per request: TTFT = first event with text − send; e2e = end of stream − send;
N = tokenizer count of the concatenated text_output; TPOT = (e2e − TTFT) / (N − 1);
mean ITL over a run = Σ(last text event − first text event) / Σ(N − 1).
The server's own timing of the same request: server TPOT = (last token − first token) / (N − 1),
server e2e = last token − arrival (a whole response's).

A model that is not decoupled (draft-target's BLS, as on the GPU path) cannot stream: the request
goes to /generate and comes back whole; TTFT is then the latency, and there is no TPOT.
"""

from __future__ import annotations

import http.client
import json
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

SAME_AS_BENCH = (
    "exclude_input_in_output",
    "return_perf_metrics",
    "return_num_output_tokens",
    "return_num_input_tokens",
)
SAME_AS_BENCH_LLMAPI = ("sampling_param_exclude_input_from_output", "sampling_param_return_perf_metrics")
SERVER_TIMES = ("arrival_time_ns", "first_token_time_ns", "last_token_time_ns")


@dataclass
class Measured:
    prompt: str
    text: str = ""
    tokens: int = 0
    events: int = 0
    start: float = 0.0
    first: float | None = None
    last: float | None = None
    end: float = 0.0
    event_times: list[float] = field(default_factory=list)
    streamed: bool = True
    server_ns: dict[str, int] = field(default_factory=dict)  # SERVER_TIMES, from the last event carrying each

    @property
    def ttft(self) -> float | None:
        return None if self.first is None else self.first - self.start

    @property
    def e2e(self) -> float:
        return self.end - self.start

    @property
    def tpot(self) -> float | None:
        if self.ttft is None or self.tokens < 2 or not self.streamed:
            return None
        return (self.e2e - self.ttft) / (self.tokens - 1)

    @property
    def server_tpot(self) -> float | None:
        t = self.server_ns
        if self.tokens < 2 or "first_token_time_ns" not in t or "last_token_time_ns" not in t:
            return None
        return (t["last_token_time_ns"] - t["first_token_time_ns"]) / 1e9 / (self.tokens - 1)

    @property
    def server_e2e(self) -> float | None:
        t = self.server_ns
        if "arrival_time_ns" not in t or "last_token_time_ns" not in t:
            return None
        return (t["last_token_time_ns"] - t["arrival_time_ns"]) / 1e9

    def _times(self, event: dict) -> None:
        # The LLM-API model sends its perf metrics as strings.
        self.server_ns.update({k: int(event[k]) for k in SERVER_TIMES if event.get(k) is not None})


class SSEClient:
    def __init__(self, http_url: str, model: str, tokenizer_dir: str, timeout: float = 120.0):
        from transformers import AutoTokenizer

        u = urlsplit(http_url if "://" in http_url else "http://" + http_url)
        self.host, self.port = u.hostname, u.port or 80
        self.model = model
        self.timeout = timeout
        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
        self.inputs, self.decoupled = self._inputs()

    def _request(self, method: str, path: str, body: bytes | None = None) -> http.client.HTTPResponse:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        headers = {"Content-Type": "application/json"} if body is not None else {}
        conn.request(method, path, body=body, headers=headers)
        return conn.getresponse()

    def _inputs(self) -> tuple[set[str], bool]:
        r = self._request("GET", f"/v2/models/{self.model}/config")
        assert r.status == 200, r.read()
        cfg = json.loads(r.read())
        policy = cfg.get("model_transaction_policy") or {}
        return {i["name"] for i in cfg.get("input", [])}, bool(policy.get("decoupled"))

    def count(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def run(self, prompt: str, max_tokens: int) -> Measured:
        llmapi = "sampling_param_max_tokens" in self.inputs
        if llmapi:
            body: dict = {"text_input": prompt, "sampling_param_max_tokens": max_tokens, "streaming": True}
        else:
            body = {"text_input": prompt, "max_tokens": max_tokens, "stream": self.decoupled}
        # The same request as sdtk bench sends, so the server does the same work (asking for perf
        # metrics costs the reference backend ~5-10% of TPOT); every output but text is ignored.
        for name in SAME_AS_BENCH_LLMAPI if llmapi else SAME_AS_BENCH:
            if name in self.inputs:
                body[name] = True
        m = Measured(prompt)
        payload = json.dumps(body).encode()
        m.start = time.monotonic()
        if not self.decoupled:  # one whole response
            r = self._request("POST", f"/v2/models/{self.model}/generate", payload)
            data = r.read()
            m.end = m.first = m.last = time.monotonic()
            assert r.status == 200, data
            whole = json.loads(data)
            m.text = whole.get("text_output", "")
            m._times(whole)
            m.events, m.event_times, m.tokens = 1, [m.end], self.count(m.text)
            m.streamed = False
            return m
        r = self._request("POST", f"/v2/models/{self.model}/generate_stream", payload)
        assert r.status == 200, r.read()
        texts = []
        while True:
            line = r.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            now = time.monotonic()
            event = json.loads(line[5:])
            assert "error" not in event, event
            m.events += 1
            m.event_times.append(now)
            m._times(event)
            text = event.get("text_output", "")
            if llmapi:  # the whole text so far: the event brings what it adds
                assert text.startswith("".join(texts)), (texts, text)
                text = text[len("".join(texts)) :]
            if text:
                texts.append(text)
                m.first = m.first if m.first is not None else now
                m.last = now
        m.end = time.monotonic()
        r.close()
        m.text = "".join(texts)
        m.tokens = self.count(m.text)
        return m


def summary(runs: list[Measured]) -> dict[str, float | None]:
    tpots = [m.tpot for m in runs if m.tpot is not None]
    ttfts = [m.ttft for m in runs if m.ttft is not None]
    span = sum((m.last - m.first) for m in runs if m.first is not None and m.tokens > 1)
    gaps = sum(m.tokens - 1 for m in runs if m.first is not None and m.tokens > 1)
    return {
        "requests": len(runs),
        "tokens_mean": sum(m.tokens for m in runs) / len(runs),
        "ttft_mean_s": sum(ttfts) / len(ttfts) if ttfts else None,
        "tpot_mean_s": sum(tpots) / len(tpots) if tpots else None,
        "itl_mean_s": span / gaps if gaps else None,
        "e2e_mean_s": sum(m.e2e for m in runs) / len(runs),
    }
