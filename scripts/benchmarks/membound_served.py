"""The memory-bound twin served (and, with --plan, plan's prediction beside it): a thin wrapper
over scripts/bench_membound_served.py, whose body stays there until it is folded into this package."""

from __future__ import annotations

from benchmarks._harness import call_script


def main(argv: list[str] | None = None) -> int | None:
    import bench_membound_served  # scripts/bench_membound_served.py (scripts/ is on sys.path)

    return call_script(bench_membound_served.main, "scripts/bench_membound_served.py", argv)
