#!/usr/bin/env python3
"""sdtk's benchmarks, in one place.

    python scripts/bench.py list                         # every benchmark: its question and docs section
    python scripts/bench.py run NAME [--quick] [--write] [ARGS ...]

`run` passes ARGS to the benchmark (`run NAME --help` lists them) and writes its section between
its markers in docs/benchmarks.md or docs/lab/benchmarks-history.md, headed by one line with the
command, the date and the machine. `--quick` adds the benchmark's small budgets (a smoke run, seconds
to a minute or two on the tiny models) and writes nowhere unless `--write` is given too.
The benchmarks themselves are the modules of scripts/benchmarks/ (registry: its __init__.py)."""

from __future__ import annotations

import argparse
import importlib
import shlex
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent
sys.path.insert(0, str(SCRIPTS.parent))  # the project's own toolkit
sys.path.insert(0, str(SCRIPTS))  # benchmarks/ and the scripts it wraps

from benchmarks import (  # noqa: E402
    BENCHMARKS,
    BY_NAME,
    Benchmark,
    _harness,  # noqa: E402
)


def entry(bench: Benchmark):  # noqa: ANN201 - the benchmark module's main(argv)
    return importlib.import_module(f"benchmarks.{bench.module}").main


def argv_for(bench: Benchmark, quick: bool, args: list[str]) -> list[str]:
    """The benchmark's own command line: its preset, then (with --quick) its small budgets, then ARGS
    (later options win, so ARGS can override a quick budget)."""
    return [*bench.preset, *(bench.quick if quick else ()), *args]


def cmd_list() -> int:
    width = max(len(b.name) for b in BENCHMARKS)
    for b in BENCHMARKS:
        print(f"{b.name:<{width}}  {b.question}\n{'':<{width}}  -> {b.doc} <!-- {b.marker} -->")
    return 0


def cmd_run(name: str, rest: list[str]) -> int:
    quick = write = False
    while rest and rest[0] in ("--quick", "--write"):
        quick, write = quick or rest[0] == "--quick", write or rest[0] == "--write"
        rest = rest[1:]
    bench = BY_NAME[name]
    shown = ["python", "scripts/bench.py", "run", name, *(["--quick"] if quick else []), *rest]
    _harness.start_run(shlex.join(shown), write=write or not quick)
    sys.argv = ["scripts/bench.py", "run", name, *rest]  # what a benchmark shows as its own command
    rc = entry(bench)(argv_for(bench, quick, rest))
    return int(rc or 0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="every benchmark, the question it answers and the section it writes")
    run = sub.add_parser("run", help="run one benchmark", add_help=False)
    run.add_argument("name", choices=sorted(BY_NAME), metavar="NAME")
    run.add_argument("rest", nargs=argparse.REMAINDER, metavar="[--quick] [--write] ARGS")
    args = ap.parse_args(argv)
    if args.command == "list":
        return cmd_list()
    return cmd_run(args.name, args.rest)


if __name__ == "__main__":
    sys.exit(main())
