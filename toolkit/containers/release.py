"""TensorRT-LLM version comparison on the release tuple: the one helper every version gate uses.

`packaging` orders a pre-release before its release: `Version("1.2.0rc2") < Version("1.2")`. A
1.2.0rc2 wheel (tensorrtllm_backend r25.11 pins `tensorrt_llm==1.2.0rc2`; r26.03 pins 1.2.0rc8) has
the 1.2 line's contract, not 1.1's, so sdtk compares (major, minor, patch) only: 1.2.0rc2 is a 1.2,
1.0.3.2510 (the compatibility matrix's 25.11 row) is a 1.0.3.
"""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

from toolkit.errors import UsageError


def parse(version: str) -> Version | None:
    """`version` as a packaging Version, None where it is not one."""
    try:
        return Version(version)
    except InvalidVersion:
        return None


def release(version: str) -> tuple[int, int, int]:
    """(major, minor, patch) of a TensorRT-LLM version; pre-release, post-release, local and build
    suffixes ignored. Raises UsageError for text that is not a version."""
    v = parse(version)
    if v is None:
        raise UsageError(f"'{version}' is not a TensorRT-LLM version")
    r = (*v.release, 0, 0)
    return (r[0], r[1], r[2])


def at_least(version: str, floor: str) -> bool:
    """`version` is `floor` or newer, on the release tuple (`at_least("1.2.0rc2", "1.2")` is True)."""
    return release(version) >= release(floor)


def below(version: str, ceiling: str) -> bool:
    """`version` is older than `ceiling`, on the release tuple (`below("1.3.0rc24", "1.3")` is False)."""
    return not at_least(version, ceiling)


def minor(version: str) -> str:
    """The release line, "major.minor" (`minor("1.2.0rc8") == "1.2"`)."""
    r = release(version)
    return f"{r[0]}.{r[1]}"


def same_release(a: str, b: str) -> bool:
    """Both versions name the same (major, minor, patch)."""
    return release(a) == release(b)
