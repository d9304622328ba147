"""The load generator's transport for OpenAI-compatible servers (Dynamo's frontend, and any other):
streamed `/v1/completions` through an async httpx client, and, where the deployment's workers export
sdtk's `sdtk_spec_*` counters (sdtk's Dynamo workers, toolkit.dynamo.worker), the acceptance of each
concurrency level read from them.

- Requests: `{"model", "prompt", "max_tokens", "stream": true, "stream_options": {"include_usage":
  true}, "temperature"}`; no temperature means greedy (0), as the Triton endpoints' default is; a
  sampled request carries its `seed`. Chunks are the SSE `data:` events (`choices[0].text`), up to
  `data: [DONE]`; an event with an `error` (Dynamo's frontend sends one when the worker serving the
  stream dies) fails the request. Chunks carry no token counts: the load generator counts tokens
  with the deployment's tokenizer (the usage's `prompt_tokens` gives the input tokens).
- Acceptance per request: sdtk's Dynamo workers return each request's counts in the response's
  `nvext.engine_data.sdtk_spec` when the request asks for `nvext.extra_fields: ["engine_data"]`
  (sent when the endpoint has the workers' metrics URLs): the records then carry accepted and
  draft tokens, steps and per-position counts as the Triton endpoints' do.
- Acceptance per level: `begin_level` / `end_level` (called by
  the load generator around each level, warm-up excluded) read every worker's counters
  (`sdtk_spec_draft_tokens_total`, `…_accepted_tokens_total`, `…_steps_total`,
  `sdtk_spec_position_{drafted,accepted}_total{position}`) and record the level's difference as
  `LevelResult.server_acceptance`, which the level's summary reports when its records have none.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from toolkit.bench.measure.loadgen import CONNECT_TIMEOUT, Chunk, Sampling
from toolkit.bench.measure.records import LevelResult
from toolkit.bench.measure.workloads import Prompt
from toolkit.bench.options import DEFAULT_TIMEOUT
from toolkit.errors import ServerError

PROTOCOL = "openai"
COUNTERS = {
    "sdtk_spec_draft_tokens_total": "draft_tokens",
    "sdtk_spec_accepted_tokens_total": "accepted_draft_tokens",
    "sdtk_spec_steps_total": "steps",
    "sdtk_spec_requests_total": "requests",
}
POSITIONS = {
    "sdtk_spec_position_drafted_total": "per_position_proposed",
    "sdtk_spec_position_accepted_total": "per_position_accepted",
}


def parse_spec_counters(text: str) -> dict[str, Any]:
    """The sdtk_spec_* counters of one /metrics page, summed over models: COUNTERS' keys as
    numbers, POSITIONS' as {position: count}."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, Any] = {key: 0.0 for key in COUNTERS.values()}
    out |= {key: {} for key in POSITIONS.values()}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name in COUNTERS:
                out[COUNTERS[s.name]] += s.value
            elif s.name in POSITIONS:
                pos = int(s.labels.get("position", "0"))
                table = out[POSITIONS[s.name]]
                table[pos] = table.get(pos, 0.0) + s.value
    return out


def counters_delta(before: Sequence[dict[str, Any]], after: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What the workers counted between two readings (one reading per worker, in the same order),
    in LevelResult.server_acceptance's form."""
    delta: dict[str, Any] = {key: 0 for key in COUNTERS.values()}
    positions: dict[str, dict[int, float]] = {key: {} for key in POSITIONS.values()}
    for b, a in zip(before, after, strict=True):
        for key in COUNTERS.values():
            delta[key] += int(round(a[key] - b[key]))
        for key in POSITIONS.values():
            for pos, n in a[key].items():
                positions[key][pos] = positions[key].get(pos, 0) + n - b[key].get(pos, 0)
    for key, table in positions.items():
        top = max(table, default=0)
        delta[key] = [int(round(table.get(p, 0))) for p in range(1, top + 1)]
    delta["source"] = f"sdtk_spec_* counters of {len(after)} worker(s)"
    return delta


def request_acceptance(event: dict[str, Any]) -> dict[str, Any]:
    """A stream event's per-request acceptance, as the load generator's chunk outputs: sdtk's
    Dynamo worker puts its request's counts in the final chunk's `engine_data.sdtk_spec`, which the
    frontend returns as `nvext.engine_data` to a request with `"nvext": {"extra_fields":
    ["engine_data"]}` (toolkit.dynamo.worker.request_acceptance)."""
    nvext = event.get("nvext")
    data = nvext.get("engine_data") if isinstance(nvext, dict) else None
    spec = data.get("sdtk_spec") if isinstance(data, dict) else None
    if not isinstance(spec, dict):
        return {}
    return {
        "total_accepted_draft_tokens": spec.get("accepted_tokens"),
        "total_draft_tokens": spec.get("draft_tokens"),
        "spec_steps": spec.get("steps"),
        "per_position_proposed": spec.get("per_position_proposed"),
        "per_position_accepted": spec.get("per_position_accepted"),
    }


class OpenAIEndpoint:
    """Streaming `/v1/completions` requests to `url` (http://host:port) for `model`."""

    def __init__(
        self,
        url: str,
        *,
        model: str,
        timeout: float = DEFAULT_TIMEOUT,
        connect_timeout: float = CONNECT_TIMEOUT,
        metrics_urls: Sequence[str] = (),
    ):
        import httpx

        self.url = url.rstrip("/").removesuffix("/v1")
        if "://" not in self.url:
            self.url = "http://" + self.url
        self.model = model
        self.name = f"{PROTOCOL}://{self.url.split('://')[-1]}/{model}"
        self.streams = True
        self.metrics_urls = list(metrics_urls)
        self._http = httpx.AsyncClient(
            base_url=self.url, timeout=httpx.Timeout(timeout, connect=connect_timeout)
        )
        self._mark: list[dict[str, Any]] | None = None

    def _error(self, e: Exception) -> ServerError:
        import httpx

        from toolkit.client.errors import ConnectionLost, ResponseTimeout, ServerUnreachable

        kw: dict[str, Any] = {"url": self.url, "model": self.model, "protocol": PROTOCOL}
        if isinstance(e, httpx.ConnectError):
            return ServerUnreachable(f"nothing answers at {self.url}: {e}", **kw)
        if isinstance(e, httpx.TimeoutException):
            return ResponseTimeout(f"no response from {self.url} in time: {e}", **kw)
        return ConnectionLost(f"{self.url}: {type(e).__name__}: {e}", **kw)

    async def _models(self) -> list[str]:
        import httpx

        try:
            r = await self._http.get("/v1/models")
        except httpx.HTTPError as e:
            raise self._error(e) from None
        if r.status_code != 200:
            raise ServerError(f"{self.url}/v1/models answered HTTP {r.status_code}")
        return [str(m.get("id", "")) for m in r.json().get("data", [])]

    async def check(self) -> None:
        listed = await self._models()
        if self.model not in listed:
            raise ServerError(
                f"{self.url}/v1/models lists {listed}, not '{self.model}'",
                hint="pass --model with one of those names",
            )

    async def alive(self) -> bool:
        try:
            return self.model in await self._models()
        except ServerError:
            return False

    async def stream(self, prompt: Prompt, *, seed: int, sampling: Sampling) -> AsyncIterator[Chunk]:
        import httpx

        from toolkit.client.errors import ClientError
        from toolkit.client.openai_api import SSE_DONE, sse_event

        temperature = sampling.temperature if sampling.temperature is not None else 0.0
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": prompt.text,
            "max_tokens": prompt.max_tokens,
            "temperature": temperature,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if temperature > 0:
            body["seed"] = seed
        if self.metrics_urls:  # sdtk's Dynamo workers: this request's acceptance in the response
            body["nvext"] = {"extra_fields": ["engine_data"]}
        if sampling.top_p is not None:
            body["top_p"] = sampling.top_p
        try:
            async with self._http.stream("POST", "/v1/completions", json=body) as r:
                if r.status_code >= 400:
                    text = (await r.aread()).decode(errors="replace")[:300]
                    raise ClientError(
                        f"HTTP {r.status_code} from /v1/completions: {text}",
                        url=self.url,
                        model=self.model,
                        protocol=PROTOCOL,
                        status=r.status_code,
                    )
                async for line in r.aiter_lines():
                    event = sse_event(line, url=self.url)
                    if event == SSE_DONE:
                        return
                    if not isinstance(event, dict):
                        continue
                    usage = event.get("usage") or {}
                    outputs = {"num_input_tokens": usage["prompt_tokens"]} if "prompt_tokens" in usage else {}
                    outputs |= request_acceptance(event)
                    choice = (event.get("choices") or [{}])[0]
                    text = choice.get("text") or ""
                    if text or outputs:
                        yield Chunk(time=time.monotonic(), text=text, outputs=outputs)
        except httpx.HTTPError as e:
            raise self._error(e) from None

    async def _read_counters(self) -> list[dict[str, Any]] | None:
        import httpx

        out = []
        for url in self.metrics_urls:
            try:
                r = await self._http.get(url, timeout=5.0)
                r.raise_for_status()
            except httpx.HTTPError:
                return None  # a worker restarting: this level's acceptance is not known
            out.append(parse_spec_counters(r.text))
        return out

    async def begin_level(self) -> None:
        self._mark = await self._read_counters() if self.metrics_urls else None

    async def end_level(self, level: LevelResult) -> None:
        if self._mark is None:
            return
        after = await self._read_counters()
        if after is not None and all(
            a[k] >= b[k] for a, b in zip(after, self._mark, strict=True) for k in COUNTERS.values()
        ):  # a counter that went down: its worker restarted during the level, which is then not known
            level.server_acceptance = counters_delta(self._mark, after)
        self._mark = None

    async def close(self) -> None:
        await self._http.aclose()
