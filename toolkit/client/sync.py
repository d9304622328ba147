"""Blocking client: generate and stream over HTTP (generate extension) or gRPC.

    with TritonClient("http://127.0.0.1:8000", model="ensemble") as c:
        r = c.generate("What is speculative decoding?", max_tokens=64)
        print(r.text, r.acceptance_rate, r.ttft_s)
        with c.stream("Tell me a story", max_tokens=128) as s:
            for chunk in s:
                print(chunk.text, end="", flush=True)
        print(s.response.num_chunks)

Transports:
- HTTP `generate`: POST /v2/models/{m}/generate (exactly one response; decoupled models too),
  streaming via /generate_stream (server-sent events). httpx.
- HTTP `infer` (`http_api="infer"`): the KServe infer API through tritonclient.http; only for
  models that are not decoupled.
- gRPC: tritonclient.grpc `infer` for non-decoupled models; the bidirectional stream
  (`start_stream` / `async_stream_infer`) for decoupled models, streaming or not.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Any

import httpx

from toolkit.client import common, llmapi
from toolkit.client.core import ClientCore
from toolkit.client.errors import ClientError
from toolkit.client.types import (
    Collector,
    GenerationChunk,
    GenerationRequest,
    GenerationResponse,
    ModelInfo,
)

RawResponses = Iterator[tuple[dict[str, Any], bool]]


class GenerationStream:
    """Iterator of GenerationChunk; `.response` (after, or draining) is the whole result.

    Use as a context manager, or call close(), to release the connection early.
    """

    def __init__(self, raw: RawResponses, collector: Collector):
        self._raw = raw
        self._collector = collector

    def __iter__(self) -> GenerationStream:
        return self

    def __next__(self) -> GenerationChunk:
        while True:
            try:
                outputs, final = next(self._raw)
            except StopIteration:
                self._collector.done = True
                raise
            chunk = self._collector.add(outputs, final)
            if chunk is not None:
                return chunk

    @property
    def chunks(self) -> list[GenerationChunk]:
        return self._collector.chunks

    @property
    def response(self) -> GenerationResponse:
        for _ in self:
            pass
        return self._collector.response()

    def close(self) -> None:
        close = getattr(self._raw, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> GenerationStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TritonClient(ClientCore):
    """Synchronous client for one model on one Triton server. Thread-safe for concurrent calls."""

    def _setup_io(self) -> None:
        self._lock = threading.Lock()
        self._http: httpx.Client | None = None
        self._grpc: Any = None
        self._infer_client: Any = None

    # ------------------------------------------------------------------ plumbing

    @property
    def http(self) -> httpx.Client:
        if self._http is None:
            self._http = httpx.Client(base_url=self.url, timeout=self._http_timeout())
        return self._http

    def _grpc_client(self) -> Any:
        import tritonclient.grpc as grpcclient

        return grpcclient.InferenceServerClient(self.url)

    @property
    def grpc(self) -> Any:
        with self._lock:
            if self._grpc is None:
                self._grpc = self._grpc_client()
            return self._grpc

    def _grpc_call(self, fn: Any, *args: Any, got_response: bool = False, **kwargs: Any) -> Any:
        from tritonclient.utils import InferenceServerException

        try:
            return fn(*args, **kwargs)
        except InferenceServerException as e:
            raise self._grpc_error(e, got_response) from None

    def list_models(self) -> list[str] | None:
        """Names in the server's model repository, or None if it cannot be asked."""
        try:
            if self.protocol == "http":
                r = self.http.post("/v2/repository/index", json={})
                return self._index_names(r.json(), "http") if r.status_code == 200 else None
            idx = self.grpc.get_model_repository_index(as_json=True, client_timeout=self.connect_timeout)
            return self._index_names(idx, "grpc")
        except Exception:  # noqa: BLE001 - only used to improve an error message
            return None

    def model_info(self, refresh: bool = False) -> ModelInfo:
        """The model's config (batching, decoupled, inputs), fetched once."""
        if self._info is not None and not refresh:
            return self._info
        if self.protocol == "http":
            with common.http_errors(self.url, self.model, self.timeout):
                r = self.http.get(f"/v2/models/{self.model}/config")
            available = self.list_models() if r.status_code in (400, 404) else None
            cfg = self._config_from_http(r, available)
        else:
            try:
                cfg = self._grpc_call(
                    self.grpc.get_model_config, self.model, as_json=True, client_timeout=self.timeout
                )
            except ClientError as e:
                if self._is_model_error(e):
                    e.hint = self._model_hint(self.list_models())
                raise
        self._info = ModelInfo.from_config(cfg)
        return self._info

    def is_ready(self) -> bool:
        """Server ready and the model ready; False (not an error) when unreachable."""
        try:
            if self.protocol == "http":
                r = self.http.get(f"/v2/models/{self.model}/ready", timeout=self.connect_timeout)
                return r.status_code == 200
            return bool(self.grpc.is_model_ready(self.model, client_timeout=self.connect_timeout))
        except Exception:  # noqa: BLE001 - readiness is a yes/no question
            return False

    # ------------------------------------------------------------------ API

    def generate(
        self, prompt: str | GenerationRequest, max_tokens: int = 64, **params: Any
    ) -> GenerationResponse:
        """One complete (non-streaming) generation."""
        info = self.model_info()
        values, col = self._prepare(self._request(prompt, max_tokens, params), info, stream=False)
        for outputs, final in self._responses(info, values, stream=False, col=col):
            col.add(outputs, final)
        self._check_responded(col)
        return col.response()

    def stream(
        self, prompt: str | GenerationRequest, max_tokens: int = 64, **params: Any
    ) -> GenerationStream:
        """A streaming generation: iterate for chunks, then `.response` for the total."""
        info = self.model_info()
        values, col = self._prepare(self._request(prompt, max_tokens, params), info, stream=True)
        return GenerationStream(self._responses(info, values, stream=True, col=col), col)

    def _responses(
        self, info: ModelInfo, values: dict[str, Any], *, stream: bool, col: Collector
    ) -> RawResponses:
        raw = self._raw_responses(info, values, stream=stream, col=col)
        return llmapi.delta_text(raw) if stream and llmapi.is_llmapi(info) else raw

    # ------------------------------------------------------------------ HTTP

    def _http_generate(self, info: ModelInfo, values: dict[str, Any], col: Collector) -> RawResponses:
        path = f"/v2/models/{self.model}/generate"
        with common.http_errors(self.url, self.model, self.timeout):
            r = self.http.post(path, json=self._json(info, values))
        common.check_http_status(r, self.url, self.model)
        yield r.json(), True

    def _http_stream(self, info: ModelInfo, values: dict[str, Any], col: Collector) -> RawResponses:
        path = f"/v2/models/{self.model}/generate_stream"
        with (
            common.http_errors(self.url, self.model, self.timeout),
            self.http.stream("POST", path, json=self._json(info, values)) as r,
        ):
            if r.status_code >= 400:
                r.read()
                common.check_http_status(r, self.url, self.model)
            events = 0
            for line in r.iter_lines():
                data = common.parse_sse_line(line, self.url, self.model)
                if data is not None:
                    events += 1
                    yield data, False
        if not events:  # a body cut before its first event (a cut mid-body raises above)
            raise common.stream_ended_empty(self.url, self.model)
        yield {}, True

    def _http_infer(self, info: ModelInfo, values: dict[str, Any], col: Collector) -> RawResponses:
        import tritonclient.http as httpclient
        from tritonclient.utils import InferenceServerException

        if self._infer_client is None:
            self._infer_client = httpclient.InferenceServerClient(
                self._http_infer_host(), connection_timeout=self.connect_timeout, network_timeout=self.timeout
            )
        try:
            result = self._infer_client.infer(self.model, self._http_infer_inputs(info, values))
        except (InferenceServerException, OSError) as e:
            raise self._http_infer_error(e) from None
        yield common.http_infer_outputs(result), True

    # ------------------------------------------------------------------ gRPC

    def _grpc_infer(self, info: ModelInfo, values: dict[str, Any], col: Collector) -> RawResponses:
        result = self._grpc_call(
            self.grpc.infer, self.model, self._grpc_inputs(info, values), client_timeout=self.timeout
        )
        outputs, _ = common.grpc_outputs(result)
        yield outputs, True

    def _grpc_stream(self, info: ModelInfo, values: dict[str, Any], col: Collector) -> RawResponses:
        """One request on its own bidirectional stream (tritonclient allows one stream per
        client, so each request gets a client: concurrent streams from threads work)."""
        from tritonclient.utils import InferenceServerException

        inbox: queue.Queue[tuple[Any, Any]] = queue.Queue()
        client = self._grpc_client()
        finished = False
        try:
            try:
                client.start_stream(callback=lambda result, error: inbox.put((result, error)))
                client.async_stream_infer(
                    self.model, self._grpc_inputs(info, values), enable_empty_final_response=True
                )
            except InferenceServerException as e:
                raise self._grpc_error(e) from None
            while True:
                try:
                    result, error = inbox.get(timeout=self.timeout)
                except queue.Empty:
                    raise self._timeout_error() from None
                if error is not None:
                    raise self._grpc_error(error, bool(col.chunks))
                outputs, final = self._stream_result(result)
                yield outputs, final
                if final:
                    finished = True
                    return
        finally:
            try:
                # After the final response, close our side and let the call end normally:
                # cancelling a finished decoupled request can keep tritonserver 2.51 from
                # unloading the model at shutdown (it then waits --exit-timeout-secs).
                client.stop_stream(cancel_requests=not finished)
            finally:
                client.close()

    # ------------------------------------------------------------------ lifetime

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
            self._http = None
        if self._grpc is not None:
            self._grpc.close()
            self._grpc = None
        if self._infer_client is not None:
            self._infer_client.close()
            self._infer_client = None

    def __enter__(self) -> TritonClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
