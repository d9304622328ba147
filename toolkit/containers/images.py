"""Which NGC Triton container carries which TensorRT-LLM version.

NVIDIA names the Triton + TensorRT-LLM containers `nvcr.io/nvidia/tritonserver:<yy.mm>-trtllm-python-py3`.
The table below is the "Container Name: trtllm-python-py3" section of Triton's Release Compatibility
Matrix: triton-inference-server/server `docs/introduction/compatibility.md` at branch r26.07 (819ee37),
rows 24.06-26.07 (docs.nvidia.com/deeplearning/triton-inference-server/user-guide/docs/introduction/
compatibility.html). Where two containers ship the same TensorRT-LLM version, the newer one is the default.

Verified rows (container -> TensorRT-LLM): 24.06 -> 0.10.0, 24.07 -> 0.11.0, 24.08 -> 0.12.0,
24.09 -> 0.13.0, 24.10 -> 0.14.0, 24.11 -> 0.15.0, 24.12 -> 0.16.0, 25.01 -> 0.17.0, 25.06 and
25.07 -> 0.20.0, 25.08 -> 0.21.0, 25.09 and 25.10 -> 1.0.0, 25.11 -> "1.0.3.2510" (a 1.0.3 build; the
Dockerfile at r25.11 pins 1.2.0rc2, see toolkit/data/containers/25.11.json), 25.12, 26.01 and
26.02 -> 1.1.0, 26.03 -> 1.2.0 (the Dockerfile at r26.03 pins 1.2.0rc8), 26.04-26.07 -> 1.2.1
(tensorrtllm_backend `dockerfile/Dockerfile.triton.trt_llm_backend` at r26.04-r26.07:
`ARG TENSORRTLLM_VER=1.2.1`). Note: 1.0.0 is 25.09/25.10, not 25.08 (which carries 0.21.0).

Not in the table: 0.18.x and 0.19.x (rows 25.02-25.05 exist in the matrix, but sdtk has no contract
facts for those containers), and anything after 26.07: the matrix at r26.07 ends there, the r26.08
branch has no trtllm-python-py3 row, and TensorRT-LLM 1.3 ships only in NVIDIA's Dynamo container
so far (triton-inference-server/server#8805). For those pass an explicit image; sdtk then says which facts it could not
verify for it.
"""

from __future__ import annotations

import re

from toolkit.containers import release
from toolkit.errors import UsageError

REGISTRY = "nvcr.io/nvidia/tritonserver"
SUFFIX = "trtllm-python-py3"
SOURCE = (
    "Triton Release Compatibility Matrix, container trtllm-python-py3: "
    "docs.nvidia.com/deeplearning/triton-inference-server/user-guide/docs/introduction/compatibility.html"
)

# TensorRT-LLM release (major.minor.patch) -> newest NGC release that ships it.
TRTLLM_TO_CONTAINER: dict[str, str] = {
    "0.10.0": "24.06",
    "0.11.0": "24.07",
    "0.12.0": "24.08",
    "0.13.0": "24.09",
    "0.14.0": "24.10",
    "0.15.0": "24.11",
    "0.16.0": "24.12",
    "0.17.0": "25.01",
    "0.20.0": "25.07",
    "0.21.0": "25.08",
    "1.0.0": "25.10",
    "1.0.3": "25.11",
    "1.1.0": "26.02",
    "1.2.0": "26.03",
    "1.2.1": "26.07",
}

# Every verified container -> its TensorRT-LLM version (a few containers share a version).
CONTAINER_TO_TRTLLM: dict[str, str] = {c: v for v, c in TRTLLM_TO_CONTAINER.items()}
CONTAINER_TO_TRTLLM.update(
    {"25.06": "0.20.0", "25.09": "1.0.0", "25.12": "1.1.0", "26.01": "1.1.0"}
    | {c: "1.2.1" for c in ("26.04", "26.05", "26.06")}
)

# Used when the recipe names no trtllm_version: the newest verified release (26.07 carries 1.2.1), which
# has the LLM-API path and, deprecated, still the engine path (toolkit.modes.core ENGINE_*).
DEFAULT_TRTLLM = "1.2.1"

_TAG = re.compile(r"^(?P<repo>.+):(?P<yymm>\d{2}\.\d{2})-trtllm-python-py3$")


def image_for(trtllm_version: str | None = None) -> str:
    """The NGC image for a TensorRT-LLM version (default: DEFAULT_TRTLLM); raises UsageError when the
    version has no verified container."""
    version = trtllm_version or DEFAULT_TRTLLM
    key = ".".join(map(str, release.release(version)))
    tag = TRTLLM_TO_CONTAINER.get(key)
    if tag is None:
        known = ", ".join(TRTLLM_TO_CONTAINER)
        newest = max(TRTLLM_TO_CONTAINER, key=release.release)
        unverified = (
            "; sdtk then says the image's TensorRT-LLM version is unverified and renders for the recipe's"
        )
        hint = f"pass --image explicitly (an image that carries TensorRT-LLM {version}){unverified}"
        later = ""
        if release.release(version) > release.release(newest):
            later = (
                f"; {newest} ({TRTLLM_TO_CONTAINER[newest]}) is the newest a verified container carries, and the "
                "1.3 line ships only in NVIDIA's Dynamo container so far (triton-inference-server/server issue #8805)"
            )
            hint = (
                "inside NVIDIA's Dynamo TensorRT-LLM container, `sdtk deploy RECIPE --target dynamo` serves it "
                "(docs/dynamo.md; its workers read the same LLM-API YAML); to serve it through Triton, pass --image "
                f"naming a Triton image you built with TensorRT-LLM {version}{unverified}; or stay on a verified "
                f"container: --set trtllm_version={newest} ({REGISTRY}:{TRTLLM_TO_CONTAINER[newest]}-{SUFFIX})"
            )
        raise UsageError(
            f"no verified NGC Triton container for TensorRT-LLM {version} (verified: {known}){later}",
            hint=hint,
        )
    return f"{REGISTRY}:{tag}-{SUFFIX}"


def trtllm_version_of(image: str) -> str | None:
    """The TensorRT-LLM version an NGC `<yy.mm>-trtllm-python-py3` image carries, when verified."""
    tag = container_of(image)
    return CONTAINER_TO_TRTLLM.get(tag) if tag else None


def container_of(image: str) -> str | None:
    """The <yy.mm> of an NGC `tritonserver:<yy.mm>-trtllm-python-py3` image name, verified or not."""
    m = _TAG.match(image)
    return m.group("yymm") if m else None


def table() -> list[dict[str, str]]:
    """Rows for display: container tag, TensorRT-LLM version, image."""
    return [
        {"container": c, "trtllm": v, "image": f"{REGISTRY}:{c}-{SUFFIX}"}
        for c, v in sorted(CONTAINER_TO_TRTLLM.items())
    ]
