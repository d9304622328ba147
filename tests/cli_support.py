"""Running the `sdtk` CLI as a subprocess from the tests, as a user would: `python -m toolkit.cli`
from the repository root, with this checkout first on PYTHONPATH, no stdin, output captured."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SDTK = [sys.executable, "-m", "toolkit.cli"]


def sdtk(
    *args: str, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`sdtk ARGS...`, its exit status and output; `env` adds to (or overrides) this environment."""
    pythonpath = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return subprocess.run(
        [*SDTK, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": pythonpath, **(env or {})},
        cwd=ROOT,
    )
