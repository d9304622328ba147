"""A minimal stand-in for `triton_python_backend_utils`, for unit tests of sdtk's Python models.

Only the API the models use: Tensor, InferenceRequest (BLS calls, routed to `MODELS`),
InferenceResponse, TritonError, the response sender, the config helpers. It is a unit-level
stand-in; the real Python backend is exercised by test_triton_integration.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_MEMORY_CPU = 0

# model name → fn(inputs: dict[str, np.ndarray], requested: list[str], decoupled: bool) → list of dicts
MODELS: dict[str, Callable[[dict[str, np.ndarray], list[str], bool], list[dict[str, np.ndarray]]]] = {}
CALLS: list[tuple[str, dict[str, np.ndarray]]] = []


class TritonError:
    UNKNOWN, INVALID_ARG, UNAVAILABLE, CANCELLED = 0, 3, 4, 10

    def __init__(self, message: str, code: int = 0):
        self._message = message
        self._code = code

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code


class Tensor:
    def __init__(self, name: str, array: Any):
        self._name = name
        self._array = np.asarray(array)

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array

    def is_cpu(self) -> bool:
        return True


class InferenceResponse:
    def __init__(self, output_tensors=(), error: TritonError | None = None):
        self._outputs = list(output_tensors)
        self._error = error

    def output_tensors(self) -> list[Tensor]:
        return self._outputs

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def as_dict(self) -> dict[str, np.ndarray]:
        return {t.name(): t.as_numpy() for t in self._outputs}


class PreferredMemory:
    def __init__(self, kind: int, device: int):
        self.kind, self.device = kind, device


class InferenceRequest:
    """A BLS request: exec() runs the fake model registered under `model_name`."""

    def __init__(
        self, model_name: str, inputs: list[Tensor], requested_output_names: list[str], **kwargs: Any
    ):
        self.model_name = model_name
        self.request_id = kwargs.get("request_id", "")
        self.inputs = {t.name(): t.as_numpy() for t in inputs}
        self.requested = list(requested_output_names)

    def _responses(self, decoupled: bool) -> list[InferenceResponse]:
        CALLS.append((self.model_name, self.inputs))
        try:
            outs = MODELS[self.model_name](self.inputs, self.requested, decoupled)
        except Exception as e:  # what Triton does with a model's error
            return [InferenceResponse(error=TritonError(str(e)))]
        return [InferenceResponse([Tensor(k, v) for k, v in o.items()]) for o in outs]

    def exec(self, decoupled: bool = False):
        responses = self._responses(decoupled)
        if decoupled:
            return iter(responses + [InferenceResponse()])  # the final, empty response
        assert len(responses) == 1, "a non-decoupled model returns exactly one response"
        return responses[0]


class ResponseSender:
    def __init__(self, cancel_after: int | None = None):
        self.sent: list[tuple[InferenceResponse | None, int]] = []
        self.cancel_after = cancel_after  # is_cancelled() turns True after this many calls
        self.polls = 0

    def is_cancelled(self) -> bool:
        self.polls += 1
        return self.cancel_after is not None and self.polls > self.cancel_after

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        assert not any(f & TRITONSERVER_RESPONSE_COMPLETE_FINAL for _, f in self.sent), "sent after FINAL"
        self.sent.append((response, flags))


class Request:
    """A request as a model's execute() receives it (test side)."""

    def __init__(self, inputs: dict[str, Any], cancel_after: int | None = None, request_id: str = ""):
        self.inputs = {k: np.asarray(v) for k, v in inputs.items()}
        self.sender = ResponseSender(cancel_after)
        self._request_id = request_id

    def request_id(self) -> str:
        return self._request_id

    def is_cancelled(self) -> bool:
        return self.sender.is_cancelled()

    def get_response_sender(self) -> ResponseSender:
        return self.sender


def get_input_tensor_by_name(request: Request, name: str) -> Tensor | None:
    return Tensor(name, request.inputs[name]) if name in request.inputs else None


def get_output_tensor_by_name(response: InferenceResponse, name: str) -> Tensor | None:
    return next((t for t in response.output_tensors() if t.name() == name), None)


def using_decoupled_model_transaction_policy(config: dict) -> bool:
    return bool(config.get("model_transaction_policy", {}).get("decoupled", False))


def get_output_config_by_name(config: dict, name: str) -> dict | None:
    return next((o for o in config.get("output", []) if o["name"] == name), None)


def triton_string_to_numpy(data_type: str) -> Any:
    return {"TYPE_INT32": np.int32, "TYPE_FP32": np.float32, "TYPE_STRING": np.object_, "TYPE_BOOL": bool}[
        data_type
    ]
