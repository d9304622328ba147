"""The GPUs of this machine, from one `nvidia-smi` query (used by `sdtk doctor` and the preflight)."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

from toolkit.errors import SdtkError
from toolkit.runner import capture

QUERY = ("name", "memory.total")


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    memory_mib: int


@dataclass(frozen=True)
class GpuQuery:
    found: bool  # nvidia-smi ran
    gpus: list[Gpu]  # every GPU nvidia-smi lists
    error: str = ""  # why not found

    def visible(self) -> list[Gpu]:
        """The GPUs CUDA_VISIBLE_DEVICES leaves (by index; other spellings leave them all)."""
        cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
        if cvd is None:
            return list(self.gpus)
        wanted = [c.strip() for c in cvd.split(",") if c.strip()]
        if not all(c.isdigit() for c in wanted):
            return list(self.gpus)
        return [self.gpus[int(c)] for c in wanted if int(c) < len(self.gpus)]


def parse(out: str) -> list[Gpu]:
    """`nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits` output."""
    gpus: list[Gpu] = []
    for line in out.splitlines():
        name, _, mem = line.strip().rpartition(",")
        mem = mem.strip()
        if mem.replace(".", "", 1).isdigit():
            gpus.append(Gpu(len(gpus), name.strip(), int(float(mem))))
    return gpus


def query_gpus(timeout: float = 10.0) -> GpuQuery:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return GpuQuery(False, [], "nvidia-smi not found")
    argv = [smi, f"--query-gpu={','.join(QUERY)}", "--format=csv,noheader,nounits"]
    try:
        out = capture(argv, step="nvidia-smi", timeout=timeout)
    except SdtkError as e:
        return GpuQuery(False, [], f"nvidia-smi failed: {e}")
    return GpuQuery(True, parse(out))
