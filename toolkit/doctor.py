"""`sdtk doctor`: what this machine offers sdtk (Python, torch, TensorRT-LLM, Triton, GPUs, disk)."""

from __future__ import annotations

import os
import platform
import shutil
import sys
from importlib import metadata
from pathlib import Path

from toolkit import checks, compat, containers
from toolkit.errors import SdtkError
from toolkit.modes import NONE
from toolkit.modes.core import ENGINE_DEPRECATION, ENGINE_REMOVAL


def _check(name: str, ok: bool, value: str, detail: str = "") -> checks.Check:
    return checks.Check(name, checks.passed_if(ok), detail, None, value)


def _dist_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _gpus() -> checks.Check:
    from toolkit.gpus import query_gpus

    q = query_gpus(timeout=20)
    if not q.found:
        if q.error == "nvidia-smi not found":
            return _check(
                "gpus", False, "none", q.error + "; the engine and llmapi backends need NVIDIA GPUs"
            )
        return _check("gpus", False, "error", q.error)
    return _check(
        "gpus",
        bool(q.gpus),
        f"{len(q.gpus)} GPU(s)",
        "; ".join(f"{g.name}, {g.memory_mib} MiB" for g in q.gpus),
    )


def _trtllm(trt: str | None) -> checks.Check:
    """The installed TensorRT-LLM and which GPU paths it has: the engine path through 1.2.x
    (deprecated on 1.2.x, NVIDIA/TensorRT-LLM PR #11723), removed in the 1.3 line (PRs #15907,
    #15918)."""
    if trt is None:
        return _check(
            "tensorrt_llm", False, "not installed",
            "use NVIDIA's NGC TensorRT-LLM container for GPU backends; the reference backend and --dry-run "
            "work without it",
        )  # fmt: skip
    engine = compat.cell(NONE, "engine")
    if compat.problems(engine, trt, None):
        return checks.Check(
            "tensorrt_llm", checks.PASSED,
            f"LLM-API path only: {ENGINE_REMOVAL}", compat.removal_fix(NONE), trt,
        )  # fmt: skip
    warned = compat.warnings(engine, trt)
    if warned:
        return checks.Check(
            "tensorrt_llm", checks.WARNING,
            f"LLM-API path, and the engine path deprecated: {ENGINE_DEPRECATION}",
            "prefer backend: llmapi (see `sdtk compat`)", trt,
        )  # fmt: skip
    return _check("tensorrt_llm", True, trt, "engine path available")


def _container() -> checks.Check | None:
    """Inside an NVIDIA Triton container: whose layout facts sdtk uses, and which are unverified
    (all of them, probed, for a container without a facts file). None outside one."""
    tag = os.environ.get(containers.CONTAINER_ENV, "").strip()
    if not tag:
        return None
    try:
        lay = containers.layout()
    except SdtkError as e:
        return checks.Check("container", checks.WARNING, str(e), e.hint, tag)
    unverified = lay.unverified()
    if lay.known:
        return checks.Check(
            "container", checks.PASSED,
            f"{lay.describe()}; unverified: {', '.join(unverified) or 'none'}", None, tag,
        )  # fmt: skip
    found = ", ".join(
        f"{n}={f.value} ({'found' if lay.host(f.value).exists() else 'MISSING'})"
        for n, f in lay.facts.facts().items()
        if n in containers.PATH_FACTS
    )
    return checks.Check(
        "container", checks.WARNING,
        f"{lay.describe()}: TensorRT-LLM {lay.facts.trtllm_version.value} "
        f"({lay.facts.trtllm_version.unverified}); probed paths: {found}",
        "add toolkit/data/containers/<yy.mm>.json from upstream (docs/contracts.md)", tag,
    )  # fmt: skip


def run_doctor(tritonserver: str | None = None, workdir: Path | None = None) -> checks.CheckReport:
    from toolkit.server.discover import find_tritonserver_candidates

    r = checks.CheckReport()
    r.checks.append(_check("python", sys.version_info >= (3, 10), platform.python_version(), sys.executable))
    torch_v = _dist_version("torch")
    r.checks.append(
        _check("torch", torch_v is not None, torch_v or "not installed", "needed by the reference backend")
    )
    r.checks.append(_trtllm(compat.installed_trtllm_version()))
    container = _container()
    if container is not None:
        r.checks.append(container)
    cands = find_tritonserver_candidates(tritonserver)
    chosen = next((c for c in cands if c.exists), None)
    r.checks.append(
        _check(
            "tritonserver",
            chosen is not None,
            str(chosen.path) if chosen else "not found",
            (f"from {chosen.source}" if chosen else "install the `server` extra (nvidia-pytriton)")
            + " | searched: "
            + ", ".join(f"{c.source}={'yes' if c.exists else 'no'}" for c in cands),
        )
    )
    r.checks.append(_gpus())
    where = workdir or Path.cwd()
    while not where.exists():
        where = where.parent
    usage = shutil.disk_usage(where)
    free_gb = usage.free / 2**30
    r.checks.append(_check("disk", free_gb > 5, f"{free_gb:.1f} GiB free", str(where)))
    hf = os.environ.get("HF_HOME") or str(Path.home() / ".cache" / "huggingface")
    offline = os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0", "false")
    r.checks.append(_check("hf_cache", True, hf, "HF_HUB_OFFLINE=1" if offline else "online"))
    return r
