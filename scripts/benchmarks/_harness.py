"""What every benchmark shares: the run's header (command, date, machine), the one way a section
is written between its markers, the machine's CPU name, the project's own `sdtk`, plot helpers.

`scripts/bench.py run NAME` sets the run (its command line, and whether it may write: a `--quick`
run writes nowhere unless `--write` is given); a benchmark calls `publish` / `write_section` with
its section and never writes a docs file itself."""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Run:
    """The benchmark run in progress: how it was invoked, and whether it may write docs files."""

    command: str = ""
    write: bool = True


RUN = Run()


def start_run(command: str, write: bool) -> None:
    """Called once by scripts/bench.py before a benchmark runs."""
    RUN.command, RUN.write = command, write


def header() -> str:
    """The one machine/command/date line at the top of every written section."""
    command = RUN.command or shlex.join(["python", *sys.argv])
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return f"_Run: `{command}` · {date} · {cpu_model()}, {cores} cores._"


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
    """Run the project's .venv/bin/sdtk (else the one beside the running Python) with `args`
    (stdin closed, output captured, return code not checked)."""
    exe = ROOT / ".venv" / "bin" / "sdtk"
    return subprocess.run(
        [str(exe if exe.exists() else Path(sys.executable).parent / "sdtk"), *args],
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def write_section(out: Path, start: str, end: str, section: str) -> bool:
    """Put `section` (the header line added after its `start` marker) in place of the text between
    `start` and `end` in `out`, or append it; atomically. Each benchmark owns its marked sections.
    Writes nothing when the run may not write (a `--quick` run without `--write`); says whether it wrote."""
    if not RUN.write:
        print(f"(not written: {start} in {out})", file=sys.stderr)
        return False
    from toolkit._fs import replace_section

    body = section.strip("\n")
    if body.startswith(start):
        body = body[len(start) :].lstrip("\n")
    if body.endswith(end):
        body = body[: -len(end)].rstrip("\n")
    replace_section(out, start, end, f"{start}\n{header()}\n\n{body}\n{end}")
    print(f"(written: {start} in {out})", file=sys.stderr)
    return True


def publish(section: str, out: Path, start: str, end: str, write: bool = True) -> None:
    """Print a benchmark's section on stdout and, with `write`, write it between its markers in
    `out` (write_section)."""
    print(section)
    if write:
        write_section(out, start, end, section)


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
    """Write `fig` to `path` atomically (a reader never sees half a PNG); not in a run that may not write."""
    from toolkit._fs import atomic_path

    if not RUN.write:
        print(f"(not written: {path})", file=sys.stderr)
        return

    with atomic_path(path, tmp_name=path.stem + ".incomplete.png") as tmp:
        fig.savefig(tmp, dpi=110, bbox_inches="tight")


def call_script(main, script: str, argv: list[str] | None):  # noqa: ANN001 - a script's main()
    """Run a not-yet-folded script's argument-less `main()` with `argv` as its command line."""
    saved = sys.argv
    sys.argv = [script, *(argv or [])]
    try:
        return main()
    finally:
        sys.argv = saved


class Parsed(Exception):
    """Raised in place of running a benchmark once its arguments parsed (`parse_only`)."""

    def __init__(self, namespace) -> None:  # noqa: ANN001 - an argparse.Namespace
        super().__init__("parsed")
        self.namespace = namespace


def parse_only(main, argv: list[str]):  # noqa: ANN001 - a benchmark's main(argv)
    """Parse `argv` as benchmark `main` would, and stop there: returns its argparse.Namespace
    (SystemExit when the arguments do not parse). Nothing is measured or written."""
    import argparse
    from unittest import mock

    real = argparse.ArgumentParser.parse_args

    def parse_and_stop(self, args=None, namespace=None):  # noqa: ANN001, ANN202
        raise Parsed(real(self, args, namespace))

    with mock.patch.object(argparse.ArgumentParser, "parse_args", parse_and_stop):
        try:
            main(argv)
        except Parsed as p:
            return p.namespace
    raise AssertionError("the benchmark returned without parsing its arguments")
