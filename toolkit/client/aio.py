"""asyncio client, same API as TritonClient with `await` / `async for`.

    async with AsyncTritonClient(url, protocol="grpc") as c:
        r = await c.generate("Hello", max_tokens=32)
        async with c.stream("Hello", max_tokens=32) as s:
            async for chunk in s:
                ...
        total = s.response   # after the iteration ended

HTTP uses httpx.AsyncClient (generate / generate_stream); gRPC uses tritonclient.grpc.aio
(`infer` for non-decoupled models, `stream_infer` for decoupled ones). Every wait for a
(next) response is bounded by `timeout`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

from toolkit.client import common, llmapi
from toolkit.client.errors import ClientError, ResponseTimeout
from toolkit.client.types import (
    Collector,
    GenerationChunk,
    GenerationRequest,
    GenerationResponse,
    ModelInfo,
    as_array,
    json_value,
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


class AsyncTritonClient:
    """asyncio client for one model on one Triton server; safe for concurrent tasks."""

    def __init__(
        self,
        url: str | None = None,
        *,
        protocol: str = "http",
        model: str = "ensemble",
        timeout: float = common.DEFAULT_TIMEOUT,
        connect_timeout: float = common.CONNECT_TIMEOUT,
    ):
        self.protocol = common.check_protocol(protocol)
        self._model = model
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.url = common.http_base(url) if protocol == "http" else common.grpc_target(url)
        self._info: ModelInfo | None = None
        self._http: httpx.AsyncClient | None = None
        self._grpc: Any = None

    @classmethod
    def from_workdir(cls, workdir: Path | str, *, protocol: str = "http", **kwargs: Any) -> AsyncTritonClient:
        from toolkit.server.state import read_state, state_path

        st = read_state(workdir)
        if st is None:
            raise ClientError(
                f"no server recorded in {state_path(workdir)}",
                hint="start one with `sdtk deploy --detach`, or pass --url",
            )
        kwargs.setdefault("model", st.model_name)
        return cls(st.http_url if protocol == "http" else st.grpc_url, protocol=protocol, **kwargs)

    @property
    def model(self) -> str:
        return self._model

    @model.setter
    def model(self, name: str) -> None:
        """Switch to another model of the same server (its config is fetched again)."""
        if name != self._model:
            self._model = name
            self._info = None

    @property
    def http(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = httpx.AsyncClient(
                base_url=self.url, timeout=httpx.Timeout(self.timeout, connect=self.connect_timeout)
            )
        return self._http

    @property
    def grpc(self) -> Any:
        if self._grpc is None:
            import tritonclient.grpc.aio as grpcaio

            self._grpc = grpcaio.InferenceServerClient(self.url)
        return self._grpc

    def _grpc_error(self, e: BaseException, got_response: bool = False) -> ClientError:
        return common.grpc_error(e, self.url, self.model, self.timeout, got_response)

    async def _grpc_await(self, coro: Any, got_response: bool = False) -> Any:
        import grpc
        from tritonclient.utils import InferenceServerException

        try:
            return await asyncio.wait_for(coro, self.timeout)
        except asyncio.TimeoutError:
            raise ResponseTimeout(
                f"no response from {self.url} within {self.timeout:g}s",
                url=self.url,
                model=self.model,
                protocol="grpc",
                hint="the server may be stuck or overloaded: `sdtk logs`; or raise the client timeout",
            ) from None
        except (InferenceServerException, grpc.RpcError) as e:
            raise self._grpc_error(e, got_response) from None

    async def model_info(self, refresh: bool = False) -> ModelInfo:
        if self._info is not None and not refresh:
            return self._info
        if self.protocol == "http":
            with common.http_errors(self.url, self.model, self.timeout):
                r = await self.http.get(f"/v2/models/{self.model}/config")
            if r.status_code in (400, 404):
                raise ClientError(
                    f"model '{self.model}' is not served at {self.url}: {common.http_error_message(r)}",
                    url=self.url,
                    model=self.model,
                    protocol="http",
                    status=r.status_code,
                    hint=common.unknown_model_hint(self.model, None),
                )
            common.check_http_status(r, self.url, self.model)
            cfg = r.json()
        else:
            cfg = await self._grpc_await(self.grpc.get_model_config(self.model, as_json=True))
        self._info = ModelInfo.from_config(cfg)
        return self._info

    async def is_ready(self) -> bool:
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
        req = (
            prompt
            if isinstance(prompt, GenerationRequest)
            else GenerationRequest(prompt, max_tokens, **params)
        )
        info = await self.model_info()
        values = req.values(info, stream=False)
        col = Collector(self.model, self.protocol, streamed=False)
        async for outputs, final in self._responses(info, values, stream=False, col=col):
            col.add(outputs, final)
        if not col.chunks:
            raise ClientError(f"{self.model}: the server sent no response", url=self.url, model=self.model)
        return col.response()

    async def stream(
        self, prompt: str | GenerationRequest, max_tokens: int = 64, **params: Any
    ) -> AsyncGenerationStream:
        """`async with await client.stream(...)` or `async for c in await client.stream(...)`."""
        req = (
            prompt
            if isinstance(prompt, GenerationRequest)
            else GenerationRequest(prompt, max_tokens, **params)
        )
        info = await self.model_info()
        values = req.values(info, stream=True)
        col = Collector(self.model, self.protocol, streamed=True)
        return AsyncGenerationStream(self._responses(info, values, stream=True, col=col), col)

    def _responses(
        self, info: ModelInfo, values: dict[str, Any], *, stream: bool, col: Collector
    ) -> RawResponses:
        raw = self._raw_responses(info, values, stream=stream, col=col)
        return llmapi.adelta_text(raw) if stream and llmapi.is_llmapi(info) else raw

    def _raw_responses(
        self, info: ModelInfo, values: dict[str, Any], *, stream: bool, col: Collector
    ) -> RawResponses:
        if self.protocol == "http":
            body = {k: json_value(v, info.inputs[k]) for k, v in values.items()}
            return self._http_stream(body) if stream else self._http_generate(body)
        if info.decoupled:
            return self._grpc_stream(info, values, col)
        return self._grpc_infer(info, values)

    async def _http_generate(self, body: dict[str, Any]) -> RawResponses:
        with common.http_errors(self.url, self.model, self.timeout):
            r = await self.http.post(f"/v2/models/{self.model}/generate", json=body)
        common.check_http_status(r, self.url, self.model)
        yield r.json(), True

    async def _http_stream(self, body: dict[str, Any]) -> RawResponses:
        path = f"/v2/models/{self.model}/generate_stream"
        with common.http_errors(self.url, self.model, self.timeout):
            async with self.http.stream("POST", path, json=body) as r:
                if r.status_code >= 400:
                    await r.aread()
                    common.check_http_status(r, self.url, self.model)
                async for line in r.aiter_lines():
                    data = common.parse_sse_line(line, self.url, self.model)
                    if data is not None:
                        yield data, False
        yield {}, True

    def _grpc_inputs(self, info: ModelInfo, values: dict[str, Any]) -> list[Any]:
        import tritonclient.grpc as grpcclient

        inputs = []
        for name, v in values.items():
            t = grpcclient.InferInput(name, info.shape, info.inputs[name])
            t.set_data_from_numpy(as_array(v, info.inputs[name], info.shape))
            inputs.append(t)
        return inputs

    async def _grpc_infer(self, info: ModelInfo, values: dict[str, Any]) -> RawResponses:
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
                outputs, final = common.grpc_outputs(result)
                if final and set(outputs) <= {"model_name"}:
                    outputs = {}
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

    async def close(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None
        if self._grpc is not None:
            await self._grpc.close()
            self._grpc = None

    async def __aenter__(self) -> AsyncTritonClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
