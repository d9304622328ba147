"""What the benchmark scripts share: the machine's CPU name and the project's own `sdtk`."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), for the machine line of docs/benchmarks.md."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def sdtk(*args: str) -> subprocess.CompletedProcess:
    """Run .venv/bin/sdtk with `args` (stdin closed, output captured, return code not checked)."""
    return subprocess.run(
        [str(ROOT / ".venv" / "bin" / "sdtk"), *args],
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
    )
