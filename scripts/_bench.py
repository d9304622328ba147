"""Compatibility for the benchmark script not yet folded into scripts/benchmarks/
(bench_membound_served.py): the harness's shared pieces under their old import."""

from benchmarks._harness import (  # noqa: F401 - re-exported
    ROOT,
    concurrency_axis,
    cpu_model,
    publish,
    save_png,
    sdtk,
    speedup_axes,
    write_section,
)
