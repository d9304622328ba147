"""Dynamo scale-out: a thin wrapper over scripts/bench_dynamo.py, whose body stays there until it
is folded into this package."""

from __future__ import annotations

from benchmarks._harness import call_script


def main(argv: list[str] | None = None) -> int | None:
    import bench_dynamo  # scripts/bench_dynamo.py (scripts/ is on sys.path)

    return call_script(bench_dynamo.main, "scripts/bench_dynamo.py", argv)
