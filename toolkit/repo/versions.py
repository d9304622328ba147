"""What differs between TensorRT-LLM versions in the repositories and commands sdtk writes.

One table, read by render (tensor names of the C++ `tensorrt_llm` model), the llmapi model-file
search and the launch plan. Each fact names the upstream file it was read from; the per-version
contract fixtures under tests/contracts/ hold the full tensor lists.

| fact | ≤ 0.19 | 0.20 – 1.1 | newest (≥ 1.2 / not declared) |
|---|---|---|---|
| tensorrt_llm min-length input | `min_length` | `min_tokens` | `min_tokens` |
| tensorrt_llm seed input | `random_seed` | `seed` | `seed` |
| `return_num_{input,output}_tokens` / `num_*_tokens` | no | no (unverified for 1.0/1.1) | yes (1.2: unverified, tests/contracts/trtllm-1.2.json) |
| llmapi `image_url`, `lora_*` inputs (`llmapi_late_inputs`) | – | no (also 1.2) | yes (≥ 1.3 / not declared; which 1.3.0rc: unverified) |

A pre-release is read as its release line (`1.3.0rc24` is a 1.3, `1.2.0rc8` a 1.2). The 1.3 line has
no C++ `tensorrt_llm` model (NVIDIA/TensorRT-LLM PR #15907); its facts are the llmapi model's
(tests/contracts/trtllm-1.3.json).

Sources: triton-inference-server/tensorrtllm_backend tag v0.19.0 `inflight_batcher_llm/src/utils.h`
(`minLength = "min_length"`, `randomSeed = "random_seed"`) and
`all_models/inflight_batcher_llm/tensorrt_llm/config.pbtxt`; the rename landed on that repository's
main in c2e65b8 (2025-05-13, after the v0.19 branch) and NVIDIA/TensorRT-LLM
`triton_backend/inflight_batcher_llm/src/utils.h` @14c3afe reads `min_tokens`/`seed` and has no
`num_*_tokens` output; `triton_backend/all_models/inflight_batcher_llm/tensorrt_llm/config.pbtxt`
@0c8de69 declares them. Which release first shipped 0c8de69 is unverified, so only an undeclared
(newest) or ≥ 1.2 version gets them.
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from toolkit import containers

# The TensorRT-LLM release image installs the Triton models here: NVIDIA/TensorRT-LLM
# docker/Dockerfile.multi @00f74ad (`tritonrelease` stage installs /app/tensorrt_llm/triton_backend/all_models).
RELEASE_IMAGE_LLMAPI_MODEL_DIR = "/app/tensorrt_llm/triton_backend/all_models/llmapi/tensorrt_llm/1"
# Where the llmapi model is looked for (first match wins after $TRTLLM_DIR): the current container's
# (toolkit/data/containers/: /app/all_models/llmapi/tensorrt_llm/1, tensorrtllm_backend
# dockerfile/Dockerfile.triton.trt_llm_backend `COPY …/triton_backend/all_models all_models`; also
# triton-inference-server/tutorials Feature_Guide/Speculative_Decoding/TRT-LLM/README.md
# `cp -R /app/all_models/llmapi/ ...`), every other known container's, then the release image's.
LLMAPI_MODEL_DIRS = tuple(
    dict.fromkeys(
        [
            str(containers.layout().llmapi_model_dir),
            *(str(containers.Layout(c, "").llmapi_model_dir) for c in containers.all_facts().values()),
            RELEASE_IMAGE_LLMAPI_MODEL_DIR,
        ]
    )
)


@dataclass(frozen=True)
class TensorNames:
    min_tokens: str
    seed: str
    token_counts: bool  # return_num_*_tokens inputs, num_*_tokens outputs
    why: str


def _parse(version: str | None) -> Version | None:
    if not version:
        return None
    try:
        return Version(version)
    except InvalidVersion:
        return None


def _line(v: Version) -> tuple[int, int]:
    """The release line (major, minor): a pre-release belongs to its line (`1.3.0rc24` is a 1.3,
    `1.2.0rc8`, the 26.03 container's pin, a 1.2), where `Version("1.3.0rc24") < Version("1.3")`."""
    major, minor = (*v.release, 0)[:2]
    return major, minor


def tensor_names(version: str | None) -> TensorNames:
    """The `tensorrt_llm` (C++ backend) input names TensorRT-LLM `version` reads (None: newest)."""
    v = _parse(version)
    if v is not None and _line(v) < (0, 20):
        return TensorNames(
            "min_length",
            "random_seed",
            False,
            f"TensorRT-LLM {version}: min_length/random_seed (v0.19.0 utils.h)",
        )
    if v is not None and _line(v) < (1, 2):
        return TensorNames(
            "min_tokens", "seed", False, f"TensorRT-LLM {version}: min_tokens/seed, no num_*_tokens (14c3afe)"
        )
    return TensorNames("min_tokens", "seed", True, f"TensorRT-LLM {version or 'newest'}: template 0c8de69")


# Inputs of the llmapi `tensorrt_llm` model (NVIDIA/TensorRT-LLM
# triton_backend/all_models/llmapi/tensorrt_llm/config.pbtxt) that no release up to 1.2 declares:
# LoRA came with NVIDIA/TensorRT-LLM PR #14079 (opened 2026-05-13), image_url with PR #18381
# (opened 2026-08-28), both after 1.0.0 (tensorrtllm_backend tag v1.0.0, 2025-09-24) and 1.1.0
# (tensorrtllm_backend b9cc224, 2025-12-19); triton-inference-server/server issue #8945 lists
# v1.2.1's inputs (text_input, streaming, stop, 11 sampling_param_*, 3 return_*) without them.
# tests/contracts/trtllm-1.0.json and trtllm-1.1.json record them under `at_tag.absent`.
LLMAPI_LATE_INPUTS = ("image_url", "lora_id", "lora_name", "lora_path", "lora_ckpt_source")


def llmapi_late_inputs(version: str | None) -> bool:
    """Whether the llmapi config of TensorRT-LLM `version` (None: newest) declares
    LLMAPI_LATE_INPUTS. Which release first ships them is unverified, so only an undeclared (newest)
    or >= 1.3 version gets them."""
    v = _parse(version)
    return v is None or _line(v) >= (1, 3)


def engine_version(config: dict) -> str | None:
    """The TensorRT-LLM version an engine directory's config.json records (trtllm-build writes it)."""
    v = config.get("version")
    return str(v) if isinstance(v, str) and _parse(v) is not None else None
