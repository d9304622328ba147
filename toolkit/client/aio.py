"""asyncio client, same API as TritonClient with `await` / `async for`.

    async with AsyncTritonClient(url, protocol="grpc") as c:
        r = await c.generate("Hello", max_tokens=32)
        async with await c.stream("Hello", max_tokens=32) as s:
            async for chunk in s:
                ...
        total = s.response   # after the iteration ended

HTTP uses httpx.AsyncClient (generate / generate_stream), or tritonclient.http.aio for the
KServe infer API (`http_api="infer"`, non-decoupled models only); gRPC uses
tritonclient.grpc.aio (`infer` for non-decoupled models, `stream_infer` for decoupled ones).
Every wait for a (next) response is bounded by `timeout`. Everything but the I/O lives in
`toolkit.client.core.ClientCore`, shared with the blocking client.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
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

RawResponses = AsyncIterator[tuple[dict[str, Any], bool]]


class AsyncGenerationStream:
    """Async iterator of GenerationChunk; `.response` once iteration has ended."""

    def __init__(self, raw: RawResponses, collector: Collector):
        self._raw = raw
        self._collector = collector

    def __aiter__(self) -> AsyncGenerationStream:
        return self

    async def __anext__(self) -> GenerationChunk:
        while True:
            try:
                outputs, final = await self._raw.__anext__()
            except StopAsyncIteration:
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
        return self._collector.response()

    async def collect(self) -> GenerationResponse:
        """Drain the stream and return the whole result."""
        async for _ in self:
            pass
        return self._collector.response()

    async def aclose(self) -> None:
        aclose = getattr(self._raw, "aclose", None)
        if aclose is not None:
            await aclose()

    async def __aenter__(self) -> AsyncGenerationStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class AsyncTritonClient(ClientCore):
    """asyncio client for one model on one Triton server; safe for concurrent tasks."""

    def _setup_io(self) -> None:
        self._http: httpx.AsyncClient | None = None
        self._grpc: Any = None
        self._infer_client: Any = None

    @property
    def http(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = httpx.AsyncClient(base_url=self.url, timeout=self._http_timeout())
        return self._http

    @property
    def grpc(self) -> Any:
        if self._grpc is None:
            import tritonclient.grpc.aio as grpcaio

            self._grpc = grpcaio.InferenceServerClient(self.url)
        return self._grpc

    async def _grpc_await(self, coro: Any, got_response: bool = False) -> Any:
        import grpc
        from tritonclient.utils import InferenceServerException

        try:
            return await asyncio.wait_for(coro, self.timeout)
        except asyncio.TimeoutError:
            raise self._timeout_error() from None
        except (InferenceServerException, grpc.RpcError) as e:
            raise self._grpc_error(e, got_response) from None

    async def list_models(self) -> list[str] | None:
        """Names in the server's model repository, or None if it cannot be asked."""
        try:
            if self.protocol == "http":
                r = await self.http.post("/v2/repository/index", json={})
                return self._index_names(r.json(), "http") if r.status_code == 200 else None
            idx = await asyncio.wait_for(
                self.grpc.get_model_repository_index(as_json=True), self.connect_timeout
            )
            return self._index_names(idx, "grpc")
        except Exception:  # noqa: BLE001 - only used to improve an error message
            return None

    async def model_info(self, refresh: bool = False) -> ModelInfo:
        """The model's config (batching, decoupled, inputs), fetched once."""
        if self._info is not None and not refresh:
            return self._info
        if self.protocol == "http":
            with common.http_errors(self.url, self.model, self.timeout):
                r = await self.http.get(f"/v2/models/{self.model}/config")
            available = await self.list_models() if r.status_code in (400, 404) else None
            cfg = self._config_from_http(r, available)
        else:
            try:
                cfg = await self._grpc_await(self.grpc.get_model_config(self.model, as_json=True))
            except ClientError as e:
                if self._is_model_error(e):
                    e.hint = self._model_hint(await self.list_models())
                raise
        self._info = ModelInfo.from_config(cfg)
        return self._info

    async def is_ready(self) -> bool:
        """Server ready and the model ready; False (not an error) when unreachable."""
        try:
            if self.protocol == "http":
                r = await self.http.get(f"/v2/models/{self.model}/ready", timeout=self.connect_timeout)
                return r.status_code == 200
            return bool(await asyncio.wait_for(self.grpc.is_model_ready(self.model), self.connect_timeout))
        except Exception:  # noqa: BLE001 - readiness is a yes/no question
            return False

    # ------------------------------------------------------------------ API

    async def generate(
        self, prompt: str | GenerationRequest, max_tokens: int = 64, **params: Any
    ) -> GenerationResponse:
        """One complete (non-streaming) generation."""
        info = await self.model_info()
        values, col = self._prepare(self._request(prompt, max_tokens, params), info, stream=False)
        async for outputs, final in self._responses(info, values, stream=False, col=col):
            col.add(outputs, final)
        self._check_responded(col)
        return col.response()

    async def stream(
        self, prompt: str | GenerationRequest, max_tokens: int = 64, **params: Any
    ) -> AsyncGenerationStream:
        """`async with await client.stream(...)` or `async for c in await client.stream(...)`."""
        info = await self.model_info()
        values, col = self._prepare(self._request(prompt, max_tokens, params), info, stream=True)
        return AsyncGenerationStream(self._responses(info, values, stream=True, col=col), col)

    def _responses(
        self, info: ModelInfo, values: dict[str, Any], *, stream: bool, col: Collector
    ) -> RawResponses:
        raw = self._raw_responses(info, values, stream=stream, col=col)
        return llmapi.adelta_text(raw) if stream and llmapi.is_llmapi(info) else raw

    # ------------------------------------------------------------------ HTTP

    async def _http_generate(self, info: ModelInfo, values: dict[str, Any], col: Collector) -> RawResponses:
        with common.http_errors(self.url, self.model, self.timeout):
            r = await self.http.post(f"/v2/models/{self.model}/generate", json=self._json(info, values))
        common.check_http_status(r, self.url, self.model)
        yield r.json(), True

    async def _http_stream(self, info: ModelInfo, values: dict[str, Any], col: Collector) -> RawResponses:
        path = f"/v2/models/{self.model}/generate_stream"
        with common.http_errors(self.url, self.model, self.timeout):
            async with self.http.stream("POST", path, json=self._json(info, values)) as r:
                if r.status_code >= 400:
                    await r.aread()
                    common.check_http_status(r, self.url, self.model)
                events = 0
                async for line in r.aiter_lines():
                    data = common.parse_sse_line(line, self.url, self.model)
                    if data is not None:
                        events += 1
                        yield data, False
        if not events:  # a body cut before its first event (a cut mid-body raises above)
            raise common.stream_ended_empty(self.url, self.model)
        yield {}, True

    async def _http_infer(self, info: ModelInfo, values: dict[str, Any], col: Collector) -> RawResponses:
        import aiohttp
        import tritonclient.http.aio as httpaio
        from tritonclient.utils import InferenceServerException

        if self._infer_client is None:
            self._infer_client = httpaio.InferenceServerClient(
                self._http_infer_host(), conn_timeout=self.connect_timeout
            )
        try:
            result = await asyncio.wait_for(
                self._infer_client.infer(self.model, self._http_infer_inputs(info, values)), self.timeout
            )
        except asyncio.TimeoutError:
            raise self._timeout_error() from None
        except (InferenceServerException, OSError, aiohttp.ClientError) as e:
            raise self._http_infer_error(e) from None
        yield common.http_infer_outputs(result), True

    # ------------------------------------------------------------------ gRPC

    async def _grpc_infer(self, info: ModelInfo, values: dict[str, Any], col: Collector) -> RawResponses:
        result = await self._grpc_await(self.grpc.infer(self.model, self._grpc_inputs(info, values)))
        outputs, _ = common.grpc_outputs(result)
        yield outputs, True

    async def _grpc_stream(self, info: ModelInfo, values: dict[str, Any], col: Collector) -> RawResponses:
        """One request on its own stream. The request side closes after the request; Triton
        ends the call once the model has sent its final response."""
        request = {"model_name": self.model, "inputs": self._grpc_inputs(info, values)}

        async def requests() -> AsyncIterator[dict[str, Any]]:
            yield request

        call = self.grpc.stream_infer(requests())
        finished = False
        try:
            while True:
                try:
                    result, error = await self._grpc_await(call.__anext__(), bool(col.chunks))
                except StopAsyncIteration:
                    finished = True
                    return
                if error is not None:
                    raise self._grpc_error(error, bool(col.chunks))
                outputs, final = self._stream_result(result)
                yield outputs, final
                if final:
                    # Let the call end normally: cancelling a finished decoupled request can
                    # keep tritonserver 2.51 from unloading the model at shutdown.
                    with contextlib.suppress(StopAsyncIteration, ClientError):
                        await self._grpc_await(call.__anext__(), True)
                    finished = True
                    return
        finally:
            if not finished:
                call.cancel()

    # ------------------------------------------------------------------ lifetime

    async def close(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None
        if self._grpc is not None:
            await self._grpc.close()
            self._grpc = None
        if self._infer_client is not None:
            await self._infer_client.close()
            self._infer_client = None

    async def __aenter__(self) -> AsyncTritonClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
