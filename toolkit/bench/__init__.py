"""bench / plan / tune: measure speculative decoding, predict it, and pick its settings.

One function per command, each returning a result with `.to_dict()` and `.render()`:

    bench(target, ...)                       -> BenchResult   (toolkit.bench.api)
    compare(baseline, speculative, ...)      -> ABResult      (toolkit.bench.ab)
    plan(recipe, ...)                        -> PlanResult    (toolkit.bench.plan)
    tune(target, recipe=..., ...)            -> TuneResult    (toolkit.bench.tune)

Imports are lazy so that `import toolkit.bench` stays cheap for the CLI.
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "bench": "toolkit.bench.api",
    "compare": "toolkit.bench.ab",
    "plan": "toolkit.bench.plan",
    "tune": "toolkit.bench.tune",
    "BenchAborted": "toolkit.bench.errors",
    "WorkloadError": "toolkit.bench.errors",
    "load_workload": "toolkit.bench.workloads",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'toolkit.bench' has no attribute '{name}'")
