"""Helpers shared by sdtk's Triton Python models.

toolkit.repo copies this file next to every sdtk `model.py` (the model's version directory is on
the Python backend's sys.path). It needs only numpy and triton_python_backend_utils: the engine
repository's Python models run inside NVIDIA's container, which need not have sdtk installed.
"""

from __future__ import annotations

import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils

_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")
_PLACEHOLDER = "$" + "{"


# --------------------------------------------------------------------------- parameters


def model_config(args: dict) -> tuple[dict, dict[str, str]]:
    """The model config (JSON from Triton) and its `parameters` as key → string value."""
    config = json.loads(args["model_config"])
    params = {k: str(v.get("string_value", "")) for k, v in config.get("parameters", {}).items()}
    return config, params


def is_unset(value: str | None) -> bool:
    """Empty, or an unfilled upstream placeholder (dollar, brace, name, brace: what upstream's
    fill_template.py leaves behind). Spelled without the two characters together, because sdtk
    checks that no rendered file contains them."""
    if value is None:
        return True
    text = value.strip()
    return text == "" or (text.startswith(_PLACEHOLDER) and text.endswith("}"))


def param_str(params: dict[str, str], key: str, default: str | None = None) -> str | None:
    value = params.get(key)
    return default if is_unset(value) else value.strip()


def param_bool(params: dict[str, str], key: str, default: bool) -> bool:
    value = param_str(params, key)
    if value is None:
        return default
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise ValueError(f"parameter {key}={value!r} is not a boolean (true/false)")


def param_int(params: dict[str, str], key: str, default: int | None) -> int | None:
    value = param_str(params, key)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"parameter {key}={value!r} is not an integer") from None


# --------------------------------------------------------------------------- tensors


def inputs_of(request, names) -> dict[str, np.ndarray]:
    """The inputs among `names` that the request carries, as numpy arrays."""
    out = {}
    for name in names:
        tensor = pb_utils.get_input_tensor_by_name(request, name)
        if tensor is not None:
            out[name] = tensor.as_numpy()
    return out


def row(array: np.ndarray, i: int) -> np.ndarray:
    """Batch row `i`, keeping the batch dimension."""
    return array[i : i + 1]


def scalar(inputs: dict[str, np.ndarray], name: str, default, i: int = 0):
    """Element `i` of a per-request scalar input ([B] after a reshape, or [B, 1]), else `default`."""
    array = inputs.get(name)
    if array is None or array.size == 0:
        return default
    flat = array.reshape(array.shape[0], -1) if array.ndim else array.reshape(1, 1)
    value = flat[min(i, flat.shape[0] - 1), 0]
    if isinstance(value, bytes):
        return value.decode("utf-8")
    return value.item() if hasattr(value, "item") else value


def as_text(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def stack_rows(rows: list[np.ndarray], fill=0) -> np.ndarray:
    """Concatenate [1, ...] rows along the batch axis, padding ragged trailing dims with `fill`."""
    if len(rows) == 1:
        return rows[0]
    shape = [max(r.shape[d] for r in rows) for d in range(1, rows[0].ndim)]
    out = np.full([len(rows), *shape], fill, dtype=rows[0].dtype)
    for i, r in enumerate(rows):
        out[(i, *(slice(0, s) for s in r.shape[1:]))] = r[0]
    return out


def word_lists(array: np.ndarray | None) -> list[list[int]]:
    """Decode one row of the [2, N] stop/bad-words format (ids, then end offsets padded with -1)."""
    if array is None or array.size == 0:
        return []
    a = np.asarray(array).reshape(2, -1)
    ids, offsets = a[0].tolist(), [int(o) for o in a[1].tolist() if o >= 0]
    out, start = [], 0
    for end in offsets:
        if end > start:
            out.append(ids[start:end])
        start = end
    return out


def stop_at(tokens: list[int], stops: list[list[int]], start: int = 0) -> int | None:
    """The length of `tokens` up to and including the first stop sequence ending at or after index
    `start`, or None. (TensorRT-LLM keeps the stop sequence in the output.)"""
    best = None
    for seq in stops:
        n = len(seq)
        if n == 0:
            continue
        for end in range(max(start + 1, n), len(tokens) + 1):
            if tokens[end - n : end] == seq:
                best = end if best is None else min(best, end)
                break
    return best


# A request parameter the BLS sets on the sub-requests of its draft-target loop, which send the
# whole sequence so far as input_ids: the reference model then bounds only prompt + output
# (max_seq_len), since the BLS has checked the client's prompt against max_input_len itself.
BLS_LOOP = "sdtk_bls_loop"


def request_parameters(request) -> dict:
    """A request's parameters (JSON from Triton); {} when it has none."""
    text = request.parameters() if hasattr(request, "parameters") else ""
    return json.loads(text) if text else {}


# --------------------------------------------------------------------------- responses


CANCEL_CHECK_S = 0.02  # how often a running request asks whether its client has gone


def every(seconds: float, probe):
    """`probe` (is_cancelled(): an IPC round trip), asked at most once per `seconds`, the first
    time `seconds` after the request started: a request shorter than that (each sub-request of
    the BLS draft-target loop) never pays for the round trip, and a loop of short steps pays for
    one every `seconds`, not one per step."""
    last = [time.monotonic()]

    def check() -> bool:
        now = time.monotonic()
        if now - last[0] < seconds:
            return False
        last[0] = now
        return bool(probe())

    return check


class Cancelled(Exception):
    """The client cancelled the request (or went away): stop generating."""


class BadRequest(ValueError):
    """The client's request is refused; the message names the input. Sent as INVALID_ARG, which
    Triton's HTTP frontend answers with 400 (a plain TritonError is INTERNAL: HTTP 500)."""


def error_response(message: str, cancelled: bool = False, bad: bool = False) -> pb_utils.InferenceResponse:
    code = "CANCELLED" if cancelled else "INVALID_ARG" if bad else None
    if code is not None and hasattr(pb_utils.TritonError, code):
        error = pb_utils.TritonError(message, getattr(pb_utils.TritonError, code))
    else:
        error = pb_utils.TritonError(message)
    return pb_utils.InferenceResponse(output_tensors=[], error=error)


def failure(what: str, e: Exception) -> pb_utils.InferenceResponse:
    """The error response for exception `e` raised while serving `what`."""
    if isinstance(e, Cancelled):
        return error_response(f"{what}: request cancelled", cancelled=True)
    return error_response(f"{what}: {e}", bad=isinstance(e, BadRequest))


def is_bad_request(error) -> bool:
    """Whether a (BLS) sub-request's TritonError is a refusal of the request (INVALID_ARG)."""
    code = getattr(pb_utils.TritonError, "INVALID_ARG", None)
    return code is not None and error.code() == code


def response(outputs: dict[str, np.ndarray]) -> pb_utils.InferenceResponse:
    return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(k, v) for k, v in outputs.items()])


def output_dtype(config: dict, name: str):
    return pb_utils.triton_string_to_numpy(pb_utils.get_output_config_by_name(config, name)["data_type"])


def send_all(sender, outputs, what: str) -> None:
    """Send each output dict of the iterable `outputs` through a decoupled response sender as soon
    as it is made, then the FINAL flag. An error ends the stream with an error response naming
    `what`."""
    final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
    try:
        for out in outputs:
            sender.send(response(out))
    except Exception as e:
        sender.send(failure(what, e), flags=final)
        return
    sender.send(flags=final)
