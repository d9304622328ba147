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


def publish(section: str, out: Path, start: str, end: str, write: bool = True) -> None:
    """Print a benchmark's section on stdout and, with `write`, put it in place of the text
    between its markers in `out` (docs/benchmarks.md): each script owns one marked section."""
    print(section)
    if write:
        from toolkit._fs import replace_section

        replace_section(out, start, end, section)


def concurrency_axis(ax, levels: list[int]) -> None:
    """A log2 concurrency axis labelled with the measured levels themselves (1, 2, 4, not 2^k)."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(levels, [str(c) for c in levels])
    ax.minorticks_off()
    ax.set_xlabel("concurrency")


def speedup_axes(ax, title: str, levels: list[int]) -> None:
    """Common look of the speedup-against-concurrency panels: the concurrency axis, the break-even line."""
    ax.axhline(1.0, color="grey", lw=1, ls="--")
    concurrency_axis(ax, levels)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)


def save_png(fig, path: Path) -> None:
    """Write `fig` to `path` atomically (a reader never sees half a PNG)."""
    from toolkit._fs import atomic_path

    with atomic_path(path, tmp_name=path.stem + ".incomplete.png") as tmp:
        fig.savefig(tmp, dpi=110, bbox_inches="tight")
