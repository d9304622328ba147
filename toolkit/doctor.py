"""`sdtk doctor`: what this machine offers sdtk (Python, torch, TensorRT-LLM, Triton, GPUs, disk)."""

from __future__ import annotations

import os
import platform
import shutil
import sys
from importlib import metadata
from pathlib import Path

from toolkit import checks, compat


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


def run_doctor(tritonserver: str | None = None, workdir: Path | None = None) -> checks.CheckReport:
    from toolkit.server.discover import find_tritonserver_candidates

    r = checks.CheckReport()
    r.checks.append(_check("python", sys.version_info >= (3, 10), platform.python_version(), sys.executable))
    torch_v = _dist_version("torch")
    r.checks.append(
        _check("torch", torch_v is not None, torch_v or "not installed", "needed by the reference backend")
    )
    trt = compat.installed_trtllm_version()
    r.checks.append(
        _check(
            "tensorrt_llm",
            trt is not None,
            trt or "not installed",
            "engine path available"
            if trt and compat.problems(compat.cell("none", "engine"), trt, None) == []
            else (
                "LLM-API path only"
                if trt
                else "use NVIDIA's NGC TensorRT-LLM container for GPU backends; "
                "the reference backend and --dry-run work without it"
            ),
        )
    )
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
