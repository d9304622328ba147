"""bench / plan / tune: measure speculative decoding, predict it, and pick its settings.

One function per command (toolkit.bench.api), each returning a result with `.to_dict()`;
`toolkit.bench.report.render(result)` is its text:

    bench(target, opts, ...)                 -> BenchResult
    compare(baseline, speculative, opts, ...) -> ABResult
    plan(recipe, opts, ...)                  -> PlanResult
    tune(target, opts, recipe=..., ...)      -> TuneResult

`opts` is one RunOptions (workload, requests, protocol, reports ...); its fields may be given as
keyword arguments instead (`bench(url, requests=8)`).

Layers, each importing only the ones below it (checked by import-linter, pyproject.toml):

    api          the commands: argument checks, then orchestrate, then the reports
    report       all rendering and report files
    orchestrate  running them: measure_side (one deployment under load; bench, compare and tune
                 all measure through it), compare's and tune's runs, plan's probe and look-ups
    decide       pure functions over measurements: compare, tune, plan (candidates, predict,
                 costmodel, sizing); no deploying, no load, no model, no I/O (import-linter)
    results      the result records of bench, compare and tune
    targets      URLs, workdirs and recipes to sides (each with its recipe, parsed once);
                 deploying for a run
    measure      load generator and its records, metrics, workloads, token counts, in-process
                 runtime, replay
    options      RunOptions, the settings the commands share (progress: a toolkit.progress Step)
    proposers  how a mode proposes drafts, derived from toolkit.modes (bench names no mode)
    errors     BenchAborted, WorkloadError, InexactCounts

Imports are lazy so that `import toolkit.bench` stays cheap for the CLI.
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "bench": "toolkit.bench.api",
    "compare": "toolkit.bench.api",
    "plan": "toolkit.bench.api",
    "tune": "toolkit.bench.api",
    "render": "toolkit.bench.report",
    "RunOptions": "toolkit.bench.options",
    "BenchAborted": "toolkit.bench.errors",
    "WorkloadError": "toolkit.bench.errors",
    "load_workload": "toolkit.bench.measure.workloads",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'toolkit.bench' has no attribute '{name}'")
