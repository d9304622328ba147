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
from pathlib import Path
from typing import Any

import httpx

from toolkit.client import common, llmapi
from toolkit.client.errors import STATUS_HINT, ClientError, ResponseTimeout, ServerUnreachable
from toolkit.client.types import (
    Collector,
    GenerationChunk,
    GenerationRequest,
    GenerationResponse,
    ModelInfo,
    as_array,
    json_value,
)
from toolkit.errors import GenerationError

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


class TritonClient:
    """Synchronous client for one model on one Triton server. Thread-safe for concurrent calls."""

    def __init__(
        self,
        url: str | None = None,
        *,
        protocol: str = "http",
        model: str = "ensemble",
        timeout: float = common.DEFAULT_TIMEOUT,
        connect_timeout: float = common.CONNECT_TIMEOUT,
        http_api: str = "generate",
    ):
        self.protocol = common.check_protocol(protocol)
        self._model = model
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        if http_api not in ("generate", "infer"):
            raise GenerationError(f"http_api must be 'generate' or 'infer', got '{http_api}'")
        self.http_api = http_api
        self.url = common.http_base(url) if protocol == "http" else common.grpc_target(url)
        self._info: ModelInfo | None = None
        self._lock = threading.Lock()
        self._http: httpx.Client | None = None
        self._grpc: Any = None
        self._http_infer: Any = None

    @classmethod
    def from_workdir(cls, workdir: Path | str, *, protocol: str = "http", **kwargs: Any) -> TritonClient:
        """For the server recorded in `<workdir>/state.json` (a detached `sdtk deploy`)."""
        from toolkit.server.state import read_state, state_path

        st = read_state(workdir)
        if st is None:
            raise ClientError(
                f"no server recorded in {state_path(workdir)}",
                hint="start one with `sdtk deploy --detach`, or pass --url",
            )
        url = st.http_url if protocol == "http" else st.grpc_url
        kwargs.setdefault("model", st.model_name)
        return cls(url, protocol=protocol, **kwargs)

    # ------------------------------------------------------------------ plumbing

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
    def http(self) -> httpx.Client:
        if self._http is None:
            self._http = httpx.Client(
                base_url=self.url, timeout=httpx.Timeout(self.timeout, connect=self.connect_timeout)
            )
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
            raise common.grpc_error(e, self.url, self.model, self.timeout, got_response) from None

    def list_models(self) -> list[str] | None:
        """Names in the server's model repository, or None if it cannot be asked."""
        try:
            if self.protocol == "http":
                r = self.http.post("/v2/repository/index", json={})
                return sorted({m["name"] for m in r.json()}) if r.status_code == 200 else None
            idx = self.grpc.get_model_repository_index(as_json=True, client_timeout=self.connect_timeout)
            return sorted({m["name"] for m in idx.get("models", [])})
        except Exception:  # noqa: BLE001 - only used to improve an error message
            return None

    def model_info(self, refresh: bool = False) -> ModelInfo:
        """The model's config (batching, decoupled, inputs), fetched once."""
        if self._info is not None and not refresh:
            return self._info
        if self.protocol == "http":
            with common.http_errors(self.url, self.model, self.timeout):
                r = self.http.get(f"/v2/models/{self.model}/config")
            if r.status_code in (400, 404):
                raise ClientError(
                    f"model '{self.model}' is not served at {self.url}: {common.http_error_message(r)}",
                    url=self.url,
                    model=self.model,
                    protocol="http",
                    status=r.status_code,
                    hint=common.unknown_model_hint(self.model, self.list_models()),
                )
            common.check_http_status(r, self.url, self.model)
            cfg = r.json()
        else:
            try:
                cfg = self._grpc_call(
                    self.grpc.get_model_config, self.model, as_json=True, client_timeout=self.timeout
                )
            except ClientError as e:
                if type(e) is ClientError:
                    e.hint = common.unknown_model_hint(self.model, self.list_models())
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
        req = (
            prompt
            if isinstance(prompt, GenerationRequest)
            else GenerationRequest(prompt, max_tokens, **params)
        )
        info = self.model_info()
        values = req.values(info, stream=False)
        col = Collector(self.model, self.protocol, streamed=False)
        for outputs, final in self._responses(info, values, stream=False, col=col):
            col.add(outputs, final)
        if not col.chunks:
            raise ClientError(f"{self.model}: the server sent no response", url=self.url, model=self.model)
        return col.response()

    def stream(
        self, prompt: str | GenerationRequest, max_tokens: int = 64, **params: Any
    ) -> GenerationStream:
        """A streaming generation: iterate for chunks, then `.response` for the total."""
        req = (
            prompt
            if isinstance(prompt, GenerationRequest)
            else GenerationRequest(prompt, max_tokens, **params)
        )
        info = self.model_info()
        values = req.values(info, stream=True)
        col = Collector(self.model, self.protocol, streamed=True)
        return GenerationStream(self._responses(info, values, stream=True, col=col), col)

    def _responses(
        self, info: ModelInfo, values: dict[str, Any], *, stream: bool, col: Collector
    ) -> RawResponses:
        raw = self._raw_responses(info, values, stream=stream, col=col)
        return llmapi.delta_text(raw) if stream and llmapi.is_llmapi(info) else raw

    def _raw_responses(
        self, info: ModelInfo, values: dict[str, Any], *, stream: bool, col: Collector
    ) -> RawResponses:
        if self.protocol == "http":
            if self.http_api == "infer":
                return self._http_infer_responses(info, values)
            return self._http_stream(values) if stream else self._http_generate(values)
        if info.decoupled:
            return self._grpc_stream(info, values, col)
        return self._grpc_infer(info, values)

    # ------------------------------------------------------------------ HTTP

    def _json(self, values: dict[str, Any]) -> dict[str, Any]:
        info = self.model_info()
        return {k: json_value(v, info.inputs[k]) for k, v in values.items()}

    def _http_generate(self, values: dict[str, Any]) -> RawResponses:
        path = f"/v2/models/{self.model}/generate"
        with common.http_errors(self.url, self.model, self.timeout):
            r = self.http.post(path, json=self._json(values))
        common.check_http_status(r, self.url, self.model)
        yield r.json(), True

    def _http_stream(self, values: dict[str, Any]) -> RawResponses:
        path = f"/v2/models/{self.model}/generate_stream"
        with (
            common.http_errors(self.url, self.model, self.timeout),
            self.http.stream("POST", path, json=self._json(values)) as r,
        ):
            if r.status_code >= 400:
                r.read()
                common.check_http_status(r, self.url, self.model)
            for line in r.iter_lines():
                data = common.parse_sse_line(line, self.url, self.model)
                if data is not None:
                    yield data, False
        yield {}, True

    def _http_infer_responses(self, info: ModelInfo, values: dict[str, Any]) -> RawResponses:
        import tritonclient.http as httpclient
        from tritonclient.utils import InferenceServerException

        if info.decoupled:
            raise GenerationError(
                f"model '{self.model}' is decoupled; the HTTP infer API cannot serve it",
                hint="use the generate endpoint (http_api='generate') or gRPC",
            )
        if self._http_infer is None:
            host = self.url.split("://", 1)[1]
            self._http_infer = httpclient.InferenceServerClient(
                host, connection_timeout=self.connect_timeout, network_timeout=self.timeout
            )
        inputs = []
        for name, v in values.items():
            t = httpclient.InferInput(name, info.shape, info.inputs[name])
            t.set_data_from_numpy(as_array(v, info.inputs[name], info.shape))
            inputs.append(t)
        try:
            result = self._http_infer.infer(self.model, inputs)
        except InferenceServerException as e:
            raise ClientError(
                f"{self.model}: {e.message()}", url=self.url, model=self.model, protocol="http"
            ) from None
        except OSError as e:
            raise ServerUnreachable(
                f"cannot connect to {self.url}: {e.strerror or e}",
                url=self.url,
                model=self.model,
                protocol="http",
                hint=STATUS_HINT,
            ) from None
        yield common.http_infer_outputs(result), True

    # ------------------------------------------------------------------ gRPC

    def _grpc_inputs(self, info: ModelInfo, values: dict[str, Any]) -> list[Any]:
        import tritonclient.grpc as grpcclient

        inputs = []
        for name, v in values.items():
            t = grpcclient.InferInput(name, info.shape, info.inputs[name])
            t.set_data_from_numpy(as_array(v, info.inputs[name], info.shape))
            inputs.append(t)
        return inputs

    def _grpc_infer(self, info: ModelInfo, values: dict[str, Any]) -> RawResponses:
        result = self._grpc_call(
            self.grpc.infer, self.model, self._grpc_inputs(info, values), client_timeout=self.timeout
        )
        outputs, _ = common.grpc_outputs(result)
        yield outputs, True

    def _grpc_stream(self, info: ModelInfo, values: dict[str, Any], col: Collector) -> RawResponses:
        """One request on its own bidirectional stream (tritonclient allows one stream per
        client, so each request gets a client: concurrent streams from threads work)."""
        from tritonclient.utils import InferenceServerException

        inbox: queue.Queue = queue.Queue()
        client = self._grpc_client()
        finished = False
        try:
            try:
                client.start_stream(callback=lambda result, error: inbox.put((result, error)))
                client.async_stream_infer(
                    self.model, self._grpc_inputs(info, values), enable_empty_final_response=True
                )
            except InferenceServerException as e:
                raise common.grpc_error(e, self.url, self.model, self.timeout, False) from None
            while True:
                try:
                    result, error = inbox.get(timeout=self.timeout)
                except queue.Empty:
                    raise ResponseTimeout(
                        f"no response from {self.url} within {self.timeout:g}s",
                        url=self.url,
                        model=self.model,
                        protocol="grpc",
                        hint="the server may be stuck or overloaded: `sdtk logs`; or raise the client timeout",
                    ) from None
                if error is not None:
                    raise common.grpc_error(error, self.url, self.model, self.timeout, bool(col.chunks))
                outputs, final = common.grpc_outputs(result)
                if final and set(outputs) <= {"model_name"}:
                    outputs = {}
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
        if self._http_infer is not None:
            self._http_infer.close()
            self._http_infer = None

    def __enter__(self) -> TritonClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
