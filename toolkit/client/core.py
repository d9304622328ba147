"""Everything the sync and async clients share except I/O.

`ClientCore` holds the address, timeouts and model, turns a prompt into input values, picks
the transport for a request, builds tritonclient inputs, and makes the errors (unknown model,
timeout, decoupled model on the infer API). `TritonClient` and `AsyncTritonClient` add only
the calls that block or await, so the two cannot drift apart.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, TypeVar

import httpx

from toolkit.client import common
from toolkit.client.errors import STATUS_HINT, ClientError, ResponseTimeout, ServerUnreachable
from toolkit.client.types import Collector, GenerationRequest, ModelInfo, as_array, json_value
from toolkit.errors import GenerationError

HTTP_APIS = ("generate", "infer")
# How one request travels: HTTP generate (one response), HTTP generate_stream (SSE),
# the HTTP infer API, gRPC infer, or a gRPC bidirectional stream (decoupled models).
Route = Literal["http_generate", "http_stream", "http_infer", "grpc_infer", "grpc_stream"]

C = TypeVar("C", bound="ClientCore")


class ClientCore:
    """Address, model and request preparation for one model on one Triton server."""

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
        if http_api not in HTTP_APIS:
            raise GenerationError(f"http_api must be 'generate' or 'infer', got '{http_api}'")
        self.http_api = http_api
        self.url = common.http_base(url) if protocol == "http" else common.grpc_target(url)
        self._info: ModelInfo | None = None
        self._setup_io()

    def _setup_io(self) -> None:
        """Connections are made lazily; subclasses set their handles to None here."""

    @classmethod
    def from_workdir(cls: type[C], workdir: Path | str, *, protocol: str = "http", **kwargs: Any) -> C:
        """For the server recorded in `<workdir>/state.json` (a detached `sdtk deploy`); `workdir`
        is the deploy workdir or the deployment directory under it (the CLI's one resolver)."""
        from toolkit.server.state import find_deployment, read_state, state_path

        workdir = find_deployment(workdir)
        st = read_state(workdir)
        if st is None:
            raise ClientError(
                f"no server recorded in {state_path(workdir)}",
                hint="start one with `sdtk deploy --detach`, or pass --url",
            )
        url = st.http_url if protocol == "http" else st.grpc_url
        kwargs.setdefault("model", st.model_name)
        return cls(url, protocol=protocol, **kwargs)

    @property
    def model(self) -> str:
        return self._model

    @model.setter
    def model(self, name: str) -> None:
        """Switch to another model of the same server (its config is fetched again)."""
        if name != self._model:
            self._model = name
            self._info = None

    def _http_timeout(self) -> httpx.Timeout:
        return httpx.Timeout(self.timeout, connect=self.connect_timeout)

    # ------------------------------------------------------------------ requests

    @staticmethod
    def _request(
        prompt: str | GenerationRequest, max_tokens: int, params: dict[str, Any]
    ) -> GenerationRequest:
        if isinstance(prompt, GenerationRequest):
            return prompt
        return GenerationRequest(prompt, max_tokens, **params)

    def _prepare(
        self, req: GenerationRequest, info: ModelInfo, *, stream: bool
    ) -> tuple[dict[str, Any], Collector]:
        """Input values (checked against the model's config) and the collector for the answer."""
        values = req.values(info, stream=stream)
        return values, Collector(self.model, self.protocol, streamed=stream)

    def _route(self, info: ModelInfo, *, stream: bool) -> Route:
        if self.protocol == "http":
            if self.http_api == "infer":
                self._check_not_decoupled(info)
                return "http_infer"
            return "http_stream" if stream else "http_generate"
        return "grpc_stream" if info.decoupled else "grpc_infer"

    def _raw_responses(self, info: ModelInfo, values: dict[str, Any], *, stream: bool, col: Collector) -> Any:
        """The transport's (async) iterator of (outputs, final) for one request."""
        route = self._route(info, stream=stream)
        return getattr(self, "_" + route)(info, values, col)

    def _check_not_decoupled(self, info: ModelInfo) -> None:
        if info.decoupled:
            raise GenerationError(
                f"model '{self.model}' is decoupled; the HTTP infer API cannot serve it",
                hint="use the generate endpoint (http_api='generate') or gRPC",
            )

    def _check_responded(self, col: Collector) -> None:
        if not col.chunks:
            raise ClientError(f"{self.model}: the server sent no response", url=self.url, model=self.model)

    def _json(self, info: ModelInfo, values: dict[str, Any]) -> dict[str, Any]:
        return {k: json_value(v, info.inputs[k]) for k, v in values.items()}

    @staticmethod
    def _tensors(module: Any, info: ModelInfo, values: dict[str, Any]) -> list[Any]:
        """tritonclient InferInputs of `module` (tritonclient.grpc or tritonclient.http)."""
        inputs = []
        for name, v in values.items():
            t = module.InferInput(name, info.shape, info.inputs[name])
            t.set_data_from_numpy(as_array(v, info.inputs[name], info.shape))
            inputs.append(t)
        return inputs

    def _grpc_inputs(self, info: ModelInfo, values: dict[str, Any]) -> list[Any]:
        import tritonclient.grpc as grpcclient

        return self._tensors(grpcclient, info, values)

    def _http_infer_inputs(self, info: ModelInfo, values: dict[str, Any]) -> list[Any]:
        import tritonclient.http as httpclient

        return self._tensors(httpclient, info, values)

    def _http_infer_host(self) -> str:
        return self.url.split("://", 1)[1]

    # ------------------------------------------------------------------ responses

    def _config_from_http(self, r: httpx.Response, available: list[str] | None) -> dict[str, Any]:
        """The JSON config of GET /v2/models/{m}/config; an unknown model gets a did-you-mean."""
        if r.status_code in (400, 404):
            raise ClientError(
                f"model '{self.model}' is not served at {self.url}: {common.http_error_message(r)}",
                url=self.url,
                model=self.model,
                protocol="http",
                status=r.status_code,
                hint=self._model_hint(available),
            )
        common.check_http_status(r, self.url, self.model)
        cfg: dict[str, Any] = r.json()
        return cfg

    @staticmethod
    def _index_names(index: Any, protocol: str) -> list[str]:
        """Model names from the repository index (HTTP: a list; gRPC as_json: {"models": [...]})."""
        entries = index if protocol == "http" else index.get("models", [])
        return sorted({m["name"] for m in entries})

    def _grpc_error(self, e: BaseException, got_response: bool = False) -> ClientError:
        return common.grpc_error(e, self.url, self.model, self.timeout, got_response)

    @staticmethod
    def _is_model_error(e: ClientError) -> bool:
        """A plain ClientError from gRPC (not unreachable/lost/timeout) is about the model."""
        return type(e) is ClientError

    def _model_hint(self, available: list[str] | None) -> str:
        return common.unknown_model_hint(self.model, available)

    def _timeout_error(self) -> ResponseTimeout:
        return ResponseTimeout(
            f"no response from {self.url} within {self.timeout:g}s",
            url=self.url,
            model=self.model,
            protocol="grpc",
            hint="the server may be stuck or overloaded: `sdtk logs`; or raise the client timeout",
        )

    def _http_infer_error(self, e: BaseException) -> ClientError:
        """tritonclient.http(.aio) failures → ClientError / ServerUnreachable."""
        from tritonclient.utils import InferenceServerException

        if isinstance(e, InferenceServerException):
            return ClientError(
                f"{self.model}: {e.message()}", url=self.url, model=self.model, protocol="http"
            )
        reason = getattr(e, "strerror", None) or str(e) or type(e).__name__
        return ServerUnreachable(
            f"cannot connect to {self.url}: {reason}",
            url=self.url,
            model=self.model,
            protocol="http",
            hint=STATUS_HINT,
        )

    @staticmethod
    def _stream_result(result: Any) -> tuple[dict[str, Any], bool]:
        """One gRPC stream response → (outputs, final); an empty final response has no outputs."""
        outputs, final = common.grpc_outputs(result)
        if final and set(outputs) <= {"model_name"}:
            outputs = {}
        return outputs, final
