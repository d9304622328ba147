"""Shared by the sync and async clients: addresses, error translation, response decoding."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import numpy as np

from toolkit.client.errors import (
    STATUS_HINT,
    ClientError,
    ConnectionLost,
    ResponseTimeout,
    ServerUnreachable,
)

PROTOCOLS = ("http", "grpc")
DEFAULT_URLS = {"http": "http://127.0.0.1:8000", "grpc": "127.0.0.1:8001"}
DEFAULT_TIMEOUT = 120.0  # seconds to wait for a (next) response
CONNECT_TIMEOUT = 10.0


def check_protocol(protocol: str) -> str:
    if protocol not in PROTOCOLS:
        from toolkit.errors import UsageError

        raise UsageError(f"protocol must be one of {', '.join(PROTOCOLS)}, got '{protocol}'")
    return protocol


def http_base(url: str | None) -> str:
    url = (url or DEFAULT_URLS["http"]).rstrip("/")
    return url if "://" in url else "http://" + url


def grpc_target(url: str | None) -> str:
    """host:port, as tritonclient.grpc wants it (accepts grpc:// or http:// prefixes)."""
    url = url or DEFAULT_URLS["grpc"]
    return url.split("://", 1)[1].rstrip("/") if "://" in url else url.rstrip("/")


def http_error_message(response: httpx.Response) -> str:
    try:
        data = response.json()
        if isinstance(data, dict) and "error" in data:
            return str(data["error"])
    except ValueError:
        pass
    return response.text.strip() or response.reason_phrase


def unknown_model_hint(model: str, available: list[str] | None) -> str:
    from toolkit.errors import did_you_mean

    if not available:
        return "check the model name (serving.model_name); `sdtk status` shows what is served"
    guess = did_you_mean(model, available)
    return (f"did you mean '{guess}'? " if guess else "") + f"served models: {', '.join(available)}"


@contextmanager
def http_errors(url: str, model: str, timeout: float) -> Iterator[None]:
    """httpx exceptions → ClientError subclasses with a hint; never a raw traceback."""
    kw: dict[str, Any] = dict(url=url, model=model, protocol="http")
    try:
        yield
    except httpx.ConnectError as e:
        raise ServerUnreachable(f"cannot connect to {url}: {_reason(e)}", hint=STATUS_HINT, **kw) from None
    except httpx.ConnectTimeout:
        raise ServerUnreachable(f"connecting to {url} timed out", hint=STATUS_HINT, **kw) from None
    except httpx.TimeoutException:
        raise ResponseTimeout(
            f"no response from {url} within {timeout:g}s",
            hint="the server may be overloaded or stuck: `sdtk logs`; or raise the client timeout",
            **kw,
        ) from None
    except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as e:
        raise ConnectionLost(
            f"the connection to {url} was lost mid-request: {_reason(e)}",
            hint="did the server crash? check `sdtk status` and `sdtk logs`",
            **kw,
        ) from None
    except httpx.HTTPError as e:
        raise ClientError(f"HTTP request to {url} failed: {_reason(e)}", hint=STATUS_HINT, **kw) from None


def _reason(e: BaseException) -> str:
    text = str(e) or type(e).__name__
    if "Connection refused" in text or "Errno 111" in text:
        return "connection refused"
    return text


def check_http_status(response: httpx.Response, url: str, model: str, hint: str | None = None) -> None:
    if response.status_code < 400:
        return
    raise ClientError(
        f"{model}: {http_error_message(response)} (HTTP {response.status_code})",
        url=url,
        model=model,
        protocol="http",
        status=response.status_code,
        hint=hint,
    )


def parse_sse_line(line: str, url: str, model: str) -> dict[str, Any] | None:
    """One `data: {...}` line of generate_stream → its JSON; errors raise ClientError."""
    line = line.strip()
    if not line.startswith("data:"):
        return None
    payload = line[5:].strip()
    if not payload:
        return None
    try:
        data = json.loads(payload)
    except ValueError:
        raise ClientError(
            f"malformed server-sent event from {url}: {payload[:200]}", url=url, model=model, protocol="http"
        ) from None
    if isinstance(data, dict) and "error" in data:
        raise ClientError(f"{model}: {data['error']}", url=url, model=model, protocol="http")
    return data


def stream_ended_empty(url: str, model: str) -> ConnectionLost:
    """A generate_stream body that ended before any event: Triton closes a stream that way when
    the model's process dies or the server stops mid-request, never for an answered request
    (sdtk's models and TensorRT-LLM's send at least one response per request)."""
    return ConnectionLost(
        f"the stream from {url} ended without any response: the server or the model failed mid-request",
        url=url,
        model=model,
        protocol="http",
        hint="did the server or a model's stub die? check `sdtk status` and `sdtk logs`",
    )


def grpc_error(e: BaseException, target: str, model: str, timeout: float, got_response: bool) -> ClientError:
    """tritonclient InferenceServerException / grpc.RpcError → a ClientError subclass."""
    status = ""
    message = str(e)
    if hasattr(e, "status") and hasattr(e, "message") and callable(e.message):
        status = str(e.status() or "")
        message = e.message() or str(e)
    elif hasattr(e, "code") and callable(e.code):  # grpc.RpcError / grpc.aio.AioRpcError
        status = str(e.code())
        details = getattr(e, "details", None)
        message = (details() if callable(details) else None) or str(e)
    kw: dict[str, Any] = dict(url=target, model=model, protocol="grpc", status=status or None)
    unavailable = "UNAVAILABLE" in status
    refused = any(s in message for s in ("failed to connect", "Connection refused", "connection refused"))
    if unavailable and refused and not got_response:
        return ServerUnreachable(f"cannot connect to {target}: connection refused", hint=STATUS_HINT, **kw)
    if unavailable or "Socket closed" in message or "CANCELLED" in status:
        return ConnectionLost(
            f"the gRPC connection to {target} was lost mid-request: {message}",
            hint="did the server crash? check `sdtk status` and `sdtk logs`",
            **kw,
        )
    if "DEADLINE_EXCEEDED" in status or "Deadline Exceeded" in message:
        return ResponseTimeout(
            f"no response from {target} within {timeout:g}s", hint="raise the client timeout", **kw
        )
    if "NOT_FOUND" in status or "unknown model" in message.lower() or "is not found" in message:
        return ClientError(f"{model}: {message}", hint=unknown_model_hint(model, None), **kw)
    return ClientError(f"{model}: {message}", **kw)


def grpc_outputs(result: Any) -> tuple[dict[str, Any], bool]:
    """A tritonclient.grpc InferResult → (name → numpy array, is the final response)."""
    resp = result.get_response()
    outputs = {o.name: result.as_numpy(o.name) for o in resp.outputs}
    final = False
    if "triton_final_response" in resp.parameters:
        final = resp.parameters["triton_final_response"].bool_param
    if resp.model_name:
        outputs["model_name"] = resp.model_name
    return outputs, final


def http_infer_outputs(result: Any) -> dict[str, Any]:
    """A tritonclient.http InferResult → name → numpy array."""
    resp = result.get_response()
    out = {o["name"]: result.as_numpy(o["name"]) for o in resp.get("outputs", [])}
    if resp.get("model_name"):
        out["model_name"] = resp["model_name"]
    return out


def scalar(value: Any) -> Any:
    """First element of a response value (JSON scalar/list or numpy array); bytes → str."""
    if isinstance(value, np.ndarray):
        value = value.reshape(-1)[0] if value.size else None
    while isinstance(value, list | tuple):
        value = value[0] if value else None
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, np.generic):
        return value.item()
    return value
