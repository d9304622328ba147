"""What goes into and comes out of a generation request, independent of the transport.

Inputs follow the TRT-LLM ensemble contract (`text_input` STRING, `max_tokens` INT32, optional
`stream`, sampling knobs, `return_perf_metrics`, BLS-only `num_draft_tokens`); each is one
element, with a leading batch dimension when the model's `max_batch_size` > 0. Types come
from the model's own config, so a model that declares an input differently still works.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from toolkit.client.common import scalar
from toolkit.errors import GenerationError, did_you_mean

# config.pbtxt data_type → the datatype name of the inference protocol.
_CONFIG_TO_WIRE = {"STRING": "BYTES"}
_NUMPY = {
    "BOOL": np.bool_,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
    "BYTES": np.object_,
}

# Request fields → ensemble input names (all [1]).
REQUEST_INPUTS = (
    "exclude_input_in_output",
    "temperature",
    "top_k",
    "top_p",
    "seed",
    "end_id",
    "return_perf_metrics",
    "num_draft_tokens",
)
ACCEPTANCE_OUTPUTS = ("acceptance_rate", "total_accepted_draft_tokens", "total_draft_tokens")
TIME_OUTPUTS = ("arrival_time_ns", "first_scheduled_time_ns", "first_token_time_ns", "last_token_time_ns")


def wire_dtype(config_type: str) -> str:
    t = config_type.removeprefix("TYPE_")
    return _CONFIG_TO_WIRE.get(t, t)


def numpy_dtype(wire: str) -> Any:
    return _NUMPY.get(wire, np.object_)


@dataclass(frozen=True)
class ModelInfo:
    """The parts of a model's config a client needs: batching, decoupling, input types."""

    name: str
    max_batch_size: int
    decoupled: bool
    inputs: dict[str, str]  # name → wire datatype (BYTES, INT32, ...)
    required: frozenset[str]
    outputs: dict[str, str]

    @property
    def batched(self) -> bool:
        return self.max_batch_size > 0

    @property
    def shape(self) -> list[int]:
        """Shape of every input: one element, with a batch dimension if the model batches."""
        return [1, 1] if self.batched else [1]

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> ModelInfo:
        """From Triton's model config as JSON (HTTP `/config`, or gRPC `as_json=True`)."""
        cfg = cfg.get("config", cfg)
        policy = cfg.get("model_transaction_policy") or {}
        inputs = {i["name"]: wire_dtype(i.get("data_type", "TYPE_STRING")) for i in cfg.get("input", [])}
        required = frozenset(i["name"] for i in cfg.get("input", []) if not i.get("optional", False))
        outputs = {o["name"]: wire_dtype(o.get("data_type", "TYPE_STRING")) for o in cfg.get("output", [])}
        return cls(
            name=cfg.get("name", ""),
            max_batch_size=int(cfg.get("max_batch_size", 0) or 0),
            decoupled=bool(policy.get("decoupled", False)),
            inputs=inputs,
            required=required,
            outputs=outputs,
        )


@dataclass(frozen=True)
class GenerationRequest:
    """One prompt and its sampling settings. None means "not sent" (the model's default)."""

    prompt: str
    max_tokens: int = 64
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None
    end_id: int | None = None
    exclude_input_in_output: bool | None = None
    return_perf_metrics: bool | None = None
    num_draft_tokens: int | None = None  # tensorrt_llm_bls only (draft-target)
    extra_inputs: Mapping[str, Any] = field(default_factory=dict)  # any other [1]-shaped input

    def values(self, info: ModelInfo, stream: bool) -> dict[str, Any]:
        """Input name → Python value, checked against the model's inputs."""
        if not isinstance(self.prompt, str) or not self.prompt:
            raise GenerationError("the prompt is empty", hint="pass some text to generate from")
        if self.max_tokens < 1:
            raise GenerationError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if stream and not info.decoupled:
            raise GenerationError(
                f"model '{info.name}' is not decoupled, so it cannot stream "
                '("Streaming is only supported if model is deployed using decoupled mode")',
                hint="set serving.decoupled: true and redeploy, or generate without streaming",
            )
        from toolkit.client import llmapi

        if llmapi.is_llmapi(info):
            values = llmapi.request_values(self, info, stream)
            self._check_inputs(values, info)
            return values
        out: dict[str, Any] = {"text_input": self.prompt, "max_tokens": self.max_tokens}
        for name in REQUEST_INPUTS:
            v = getattr(self, name)
            if v is not None:
                out[name] = v
        out.update(self.extra_inputs)
        # The ensemble calls it `stream`; the LLM-API model `streaming`.
        if "stream" in info.inputs:
            out["stream"] = stream
        elif "streaming" in info.inputs:
            out["streaming"] = stream
        self._check_inputs(out, info)
        return out

    @staticmethod
    def _check_inputs(out: dict[str, Any], info: ModelInfo) -> None:
        for name in out:
            if name not in info.inputs:
                raise GenerationError(
                    f"model '{info.name}' has no input '{name}'", hint=_input_hint(name, info)
                )
        missing = sorted(info.required - set(out))
        if missing:
            raise GenerationError(
                f"model '{info.name}' requires input(s) {', '.join(missing)}",
                hint="pass them with extra_inputs",
            )


def _input_hint(name: str, info: ModelInfo) -> str:
    if name == "num_draft_tokens":
        return "num_draft_tokens is an input of tensorrt_llm_bls (draft-target), not of the ensemble; call that model"
    guess = did_you_mean(name, info.inputs)
    return f"did you mean '{guess}'?" if guess else f"its inputs: {', '.join(sorted(info.inputs))}"


def as_array(value: Any, wire: str, shape: list[int]) -> np.ndarray:
    dtype = numpy_dtype(wire)
    if wire == "BYTES" and isinstance(value, str):
        value = value.encode()
    return np.array([value], dtype=dtype).reshape(shape)


def json_value(value: Any, wire: str) -> Any:
    """A value as the generate endpoint's JSON wants it for an input of type `wire`."""
    if wire == "BOOL":
        return bool(value)
    if wire.startswith(("INT", "UINT")):
        return int(value)
    if wire.startswith("FP"):
        return float(value)
    return value


def _num(value: Any, kind: type) -> Any:
    # The LLM-API model returns perf metrics as strings ("0.0").
    try:
        return kind(float(value)) if kind is int else kind(value)
    except (TypeError, ValueError):
        return None


def parse_outputs(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Response tensors → plain values: text_output as str, counters as int, rates as float."""
    out: dict[str, Any] = {}
    for name, value in raw.items():
        v = scalar(value)
        if name == "text_output":
            out[name] = "" if v is None else str(v)
        elif name == "acceptance_rate":
            out[name] = _num(v, float)
        elif name.endswith("_ns") or name.startswith(("total_", "num_")):
            out[name] = _num(v, int)
        else:
            out[name] = v
    return out


@dataclass
class GenerationChunk:
    """One response of a (streaming) request: the new text and what came with it."""

    index: int
    text: str
    time_ns: int  # time.monotonic_ns() when the client received it
    outputs: dict[str, Any]
    final: bool = False  # the server flagged it as the last one (gRPC; SSE streams just end)


@dataclass
class GenerationResponse:
    """A finished request: text, client-side timing per chunk, acceptance stats, server times."""

    text: str
    model: str
    protocol: str  # "http" | "grpc"
    streamed: bool
    request_start_ns: int  # time.monotonic_ns() just before the request was sent
    end_ns: int  # time.monotonic_ns() when the last response arrived
    chunk_times_ns: list[int] = field(default_factory=list)  # monotonic ns of each chunk received
    output_tokens: int | None = None  # the server's count: sum of every response's num_output_tokens
    input_tokens: int | None = None
    acceptance_rate: float | None = None
    total_accepted_draft_tokens: int | None = None
    total_draft_tokens: int | None = None
    server_times_ns: dict[str, int] = field(default_factory=dict)  # arrival/first/last token (wall ns)
    outputs: dict[str, Any] = field(default_factory=dict)  # last value of every output

    @property
    def num_chunks(self) -> int:
        return len(self.chunk_times_ns)

    @property
    def latency_s(self) -> float:
        return (self.end_ns - self.request_start_ns) / 1e9

    @property
    def ttft_s(self) -> float | None:
        """Time to the first chunk, as the client saw it."""
        return (self.chunk_times_ns[0] - self.request_start_ns) / 1e9 if self.chunk_times_ns else None

    @property
    def chunk_gaps_s(self) -> list[float]:
        t = self.chunk_times_ns
        return [(b - a) / 1e9 for a, b in zip(t, t[1:], strict=False)]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(num_chunks=self.num_chunks, latency_s=self.latency_s, ttft_s=self.ttft_s)
        return d


class Collector:
    """Turns the responses of one request into chunks and, at the end, a GenerationResponse."""

    def __init__(self, model: str, protocol: str, streamed: bool):
        self.model = model
        self.protocol = protocol
        self.streamed = streamed
        self.start_ns = time.monotonic_ns()
        self.chunks: list[GenerationChunk] = []
        self.done = False
        self._last: dict[str, Any] = {}
        self._counts: list[int] = []

    def add(self, raw: Mapping[str, Any], final: bool) -> GenerationChunk | None:
        """Record one response; None for an empty final-flag-only response."""
        now = time.monotonic_ns()
        self.done = self.done or final
        if not raw:
            return None
        outputs = parse_outputs(raw)
        if "model_name" in outputs:
            self.model = str(outputs.pop("model_name"))
        outputs.pop("model_version", None)
        self._last.update({k: v for k, v in outputs.items() if v is not None})
        if isinstance(outputs.get("num_output_tokens"), int):
            self._counts.append(outputs["num_output_tokens"])
        chunk = GenerationChunk(len(self.chunks), outputs.get("text_output", ""), now, outputs, final)
        self.chunks.append(chunk)
        return chunk

    def _output_tokens(self) -> int | None:
        """The server's count: every response carries the tokens it adds (docs/contracts.md),
        so a stream's total is the sum; None unless every response carried one."""
        c = self._counts
        if not c or len(c) != len(self.chunks):
            return None
        return sum(c)

    def response(self) -> GenerationResponse:
        last = self._last
        return GenerationResponse(
            text="".join(c.text for c in self.chunks),
            model=self.model,
            protocol=self.protocol,
            streamed=self.streamed,
            request_start_ns=self.start_ns,
            end_ns=self.chunks[-1].time_ns if self.chunks else time.monotonic_ns(),
            chunk_times_ns=[c.time_ns for c in self.chunks],
            output_tokens=self._output_tokens(),
            input_tokens=last.get("num_input_tokens"),
            acceptance_rate=last.get("acceptance_rate"),
            total_accepted_draft_tokens=last.get("total_accepted_draft_tokens"),
            total_draft_tokens=last.get("total_draft_tokens"),
            server_times_ns={k: last[k] for k in TIME_OUTPUTS if last.get(k) is not None},
            outputs={k: v for k, v in last.items() if k != "text_output"},
        )
