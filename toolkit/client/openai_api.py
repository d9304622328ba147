"""A small client for OpenAI-compatible servers: `/v1/models`, `/v1/completions`,
`/v1/chat/completions`, streamed (server-sent events, `data: {...}` lines ending in
`data: [DONE]`) and not. Dynamo's frontend speaks this API (and so do vLLM, SGLang and
trtllm-serve); sdtk's Triton deployments speak KServe generate (toolkit.client.sync).

Text is what the server returns: `choices[0].text` (completions) or `choices[0].message.content`
/ `choices[0].delta.content` (chat). Failures are toolkit.client.errors ClientError subclasses.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from toolkit.client.errors import STATUS_HINT, ClientError, ConnectionLost, ResponseTimeout, ServerUnreachable

PROTOCOL = "openai"


@dataclass
class OpenAIResponse:
    text: str
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    chunks: int = 0  # streamed: the chunks that carried text
    chunk_times: list[float] = field(default_factory=list)  # streamed: perf_counter() of each
    seconds: float = 0.0


class OpenAIClient:
    """Requests to `base_url` (http://host:port, without /v1) for `model`."""

    def __init__(self, base_url: str, model: str, timeout: float = 120.0):
        self.url = base_url.rstrip("/").removesuffix("/v1")
        self.model = model
        self._http = httpx.Client(base_url=self.url, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> OpenAIClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _error(self, e: Exception) -> ClientError:
        kw: dict[str, Any] = {"url": self.url, "model": self.model, "protocol": PROTOCOL}
        if isinstance(e, httpx.ConnectError):
            return ServerUnreachable(f"nothing answers at {self.url}: {e}", hint=STATUS_HINT, **kw)
        if isinstance(e, httpx.TimeoutException):
            return ResponseTimeout(f"no response from {self.url} in time: {e}", **kw)
        return ConnectionLost(f"{self.url}: {e.__class__.__name__}: {e}", hint=STATUS_HINT, **kw)

    def models(self) -> list[str]:
        try:
            r = self._http.get("/v1/models")
        except httpx.HTTPError as e:
            raise self._error(e) from None
        self._check(r)
        return [m.get("id", "") for m in r.json().get("data", [])]

    def post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        """A raw POST (for malformed-request checks): the response, whatever its status."""
        try:
            return self._http.post(path, json=body)
        except httpx.HTTPError as e:
            raise self._error(e) from None

    def _check(self, r: httpx.Response) -> None:
        if r.status_code >= 400:
            try:
                detail = r.json()
                msg = str(detail.get("message") or detail.get("error") or detail)
            except ValueError:
                msg = r.text[:300]
            raise ClientError(
                f"HTTP {r.status_code} from {r.request.url.path}: {msg}",
                url=self.url,
                model=self.model,
                protocol=PROTOCOL,
                status=r.status_code,
            )

    def complete(
        self, prompt: str, max_tokens: int, *, stream: bool = False, **params: Any
    ) -> OpenAIResponse:
        """`/v1/completions`; `params`: temperature (default 0: greedy), seed, top_p, stop, ..."""
        body = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0}
        return self._request("/v1/completions", body | params, stream, chat=False)

    def chat(
        self, messages: str | list[dict[str, str]], max_tokens: int, *, stream: bool = False, **params: Any
    ) -> OpenAIResponse:
        """`/v1/chat/completions`; a string is one user message."""
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        body = {"model": self.model, "messages": messages, "max_tokens": max_tokens, "temperature": 0.0}
        return self._request("/v1/chat/completions", body | params, stream, chat=True)

    def _request(self, path: str, body: dict[str, Any], stream: bool, *, chat: bool) -> OpenAIResponse:
        t0 = time.perf_counter()
        if not stream:
            r = self.post(path, body)
            self._check(r)
            data = r.json()
            choice = (data.get("choices") or [{}])[0]
            text = (choice.get("message") or {}).get("content") if chat else choice.get("text")
            return OpenAIResponse(
                text=text or "",
                finish_reason=choice.get("finish_reason"),
                usage=data.get("usage"),
                seconds=time.perf_counter() - t0,
            )
        out = OpenAIResponse(text="")
        for _ in self.stream(path, body, out, chat=chat):
            pass
        out.seconds = time.perf_counter() - t0
        return out

    def stream(self, path: str, body: dict[str, Any], out: OpenAIResponse, *, chat: bool) -> Iterator[str]:
        """Stream `body` to `path`, yielding each piece of text as it arrives; `out` collects the
        whole text, the finish reason, the usage and the chunks' times."""
        parts: list[str] = []
        try:
            with self._http.stream("POST", path, json=body | {"stream": True}) as r:
                if r.status_code >= 400:
                    r.read()
                    self._check(r)
                for event in _events(r.iter_lines()):
                    choice = (event.get("choices") or [{}])[0]
                    piece = (choice.get("delta") or {}).get("content") if chat else choice.get("text")
                    out.finish_reason = choice.get("finish_reason") or out.finish_reason
                    out.usage = event.get("usage") or out.usage
                    if piece:
                        parts.append(piece)
                        out.text = "".join(parts)
                        out.chunks += 1
                        out.chunk_times.append(time.perf_counter())
                        yield piece
        except httpx.HTTPError as e:
            raise self._error(e) from None


SSE_DONE = "[DONE]"


def sse_event(line: str, *, url: str | None = None) -> dict[str, Any] | str | None:
    """One line of an OpenAI SSE stream: the JSON object of a `data:` line, SSE_DONE at
    `data: [DONE]`, None for anything else (comments, blank lines, unparsable or non-object payloads).
    An error event (an `error` and no choices) raises ClientError."""
    if not line.startswith("data:"):
        return None
    payload = line[5:].strip()
    if payload == SSE_DONE:
        return SSE_DONE
    try:
        event = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(event, dict):
        return None
    if "error" in event and not event.get("choices"):
        raise ClientError(f"error in stream: {event['error']}", protocol=PROTOCOL, url=url)
    return event


def _events(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """The JSON payloads of an SSE stream's `data:` lines, up to `data: [DONE]`."""
    for line in lines:
        event = sse_event(line)
        if event == SSE_DONE:
            return
        if isinstance(event, dict):
            yield event
