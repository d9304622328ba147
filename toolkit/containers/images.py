"""Which NGC Triton container carries which TensorRT-LLM version.

NVIDIA names the Triton + TensorRT-LLM containers `nvcr.io/nvidia/tritonserver:<yy.mm>-trtllm-python-py3`.
The table below is the "Container Name: trtllm-python-py3" section of Triton's Release Compatibility
Matrix (docs.nvidia.com/deeplearning/triton-inference-server/user-guide/docs/introduction/compatibility.html,
rows 24.06-25.12 as read for this table). Where two containers ship the same TensorRT-LLM version, the
newer one is the default.

Verified rows (container -> TensorRT-LLM): 24.06 -> 0.10.0, 24.07 -> 0.11.0, 24.08 -> 0.12.0,
24.09 -> 0.13.0, 24.10 -> 0.14.0, 24.11 -> 0.15.0, 24.12 -> 0.16.0, 25.01 -> 0.17.0, 25.06 and
25.07 -> 0.20.0, 25.08 -> 0.21.0, 25.09 and 25.10 -> 1.0.0, 25.11 -> "1.0.3.2510" (a 1.0.x build),
25.12 -> 1.1.0. Note: 1.0.0 is 25.09/25.10, not 25.08 (which carries 0.21.0).

Not in the table, because unverified: 0.18.x and 0.19.x (rows 25.02-25.05 were not readable), and any
1.2.x container (release notes exist for 26.02, but no TensorRT-LLM version could be confirmed). For
those pass an explicit image.
"""

from __future__ import annotations

import re

from packaging.version import InvalidVersion, Version

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
    "1.1.0": "25.12",
}

# Every verified container -> its TensorRT-LLM version (a few containers share a version).
CONTAINER_TO_TRTLLM: dict[str, str] = {c: v for v, c in TRTLLM_TO_CONTAINER.items()}
CONTAINER_TO_TRTLLM.update({"25.06": "0.20.0", "25.09": "1.0.0"})

# Used when the recipe names no trtllm_version: the newest verified release, which still has both the
# engine path (< 1.2) and the LLM-API path (>= 1.0).
DEFAULT_TRTLLM = "1.1.0"

_TAG = re.compile(r"^(?P<repo>.+):(?P<yymm>\d{2}\.\d{2})-trtllm-python-py3$")


def image_for(trtllm_version: str | None = None) -> str:
    """The NGC image for a TensorRT-LLM version (default: DEFAULT_TRTLLM); raises UsageError when the
    version has no verified container."""
    version = trtllm_version or DEFAULT_TRTLLM
    try:
        v = Version(version)
    except InvalidVersion:
        raise UsageError(f"'{version}' is not a TensorRT-LLM version") from None
    key = f"{v.major}.{v.minor}.{v.micro}"
    tag = TRTLLM_TO_CONTAINER.get(key)
    if tag is None:
        known = ", ".join(TRTLLM_TO_CONTAINER)
        raise UsageError(
            f"no verified NGC Triton container for TensorRT-LLM {version} (verified: {known})",
            hint="pass --image explicitly, e.g. nvcr.io/nvidia/tritonserver:<yy.mm>-trtllm-python-py3",
        )
    return f"{REGISTRY}:{tag}-{SUFFIX}"


def trtllm_version_of(image: str) -> str | None:
    """The TensorRT-LLM version an NGC `<yy.mm>-trtllm-python-py3` image carries, when verified."""
    m = _TAG.match(image)
    if not m:
        return None
    return CONTAINER_TO_TRTLLM.get(m.group("yymm"))


def table() -> list[dict[str, str]]:
    """Rows for display: container tag, TensorRT-LLM version, image."""
    return [
        {"container": c, "trtllm": v, "image": f"{REGISTRY}:{c}-{SUFFIX}"}
        for c, v in sorted(CONTAINER_TO_TRTLLM.items())
    ]
