"""The results of bench, compare and tune: plain records with `to_dict()`.

They hold measurements and verdicts, nothing else: rendering and writing them is
toolkit.bench.report (`render(result)`), and the commands that fill them are toolkit.bench.api.
A run's own records (BenchResult, LevelResult) are measure.records' and are re-exported
here. `plan`'s records live next to its predictions (decide.predict).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.bench.measure.metrics import Interval
from toolkit.bench.measure.records import BenchResult, LevelResult

if TYPE_CHECKING:
    from toolkit.bench.measure.replay import ReplayedAcceptance

__all__ = ["ABResult", "BenchResult", "Cell", "LevelComparison", "LevelResult", "TuneResult"]

SPEEDUP_DEFINITION = (
    "mean per-request output tok/s (output tokens ÷ e2e) speculative ÷ baseline; 95% CI by paired "
    "bootstrap over requests"
)


@dataclass
class LevelComparison:
    concurrency: int
    speedup: Interval  # per-user output tok/s ratio
    tpot_speedup: Interval  # mean TPOT baseline ÷ speculative
    ttft_ratio: Interval  # mean TTFT speculative ÷ baseline (> 1: speculation delays the first token)
    throughput_ratio: float | None  # aggregate output tok/s speculative ÷ baseline
    pairs: int
    paired: bool
    baseline: dict[str, Any]
    speculative: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {
            "concurrency": self.concurrency,
            "speedup": self.speedup.to_dict(),
            "tpot_speedup": self.tpot_speedup.to_dict(),
            "ttft_ratio": self.ttft_ratio.to_dict(),
            "throughput_ratio": self.throughput_ratio,
            "pairs": self.pairs,
            "paired": self.paired,
            "baseline": self.baseline,
            "speculative": self.speculative,
        }


@dataclass
class ABResult:
    baseline_label: str
    speculative_label: str
    workload: dict[str, Any]
    settings: dict[str, Any]
    baseline: BenchResult | None = None
    speculative: BenchResult | None = None
    levels: list[LevelComparison] = field(default_factory=list)
    verdict: str = ""
    break_even: int | None = None
    break_even_basis: str | None = None  # "ci" (CI upper bound < 1) | "point" (point estimate < 1)
    adopt_for: int | None = None  # speculation is significantly faster at every level ≤ this
    partial: bool = False
    error: str | None = None
    report_dir: Path | None = None
    report_files: list[Path] = field(default_factory=list)
    replayed: ReplayedAcceptance | None = None  # per-position acceptance of the speculative side
    definitions: dict[str, str] = field(
        default_factory=lambda: {
            "speedup": SPEEDUP_DEFINITION,
            "tpot_speedup": "mean TPOT baseline ÷ mean TPOT speculative, TPOT = (e2e − TTFT)/(tokens − 1)",
            "ttft_ratio": "mean TTFT speculative ÷ baseline",
            "throughput_ratio": "aggregate output tok/s speculative ÷ baseline (one run each, no CI)",
            "break_even": "first concurrency whose speedup CI upper bound is < 1 (else whose point estimate is < 1)",
            "adopt_for": "largest concurrency up to which every level's speedup CI lower bound is > 1",
        }
    )

    @property
    def token_counts_exact(self) -> bool:
        return all(r.token_counts_exact for r in (self.baseline, self.speculative) if r is not None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "compare",
            "baseline": self.baseline_label,
            "speculative": self.speculative_label,
            "token_counts_exact": self.token_counts_exact,
            "workload": self.workload,
            "settings": self.settings,
            "definitions": self.definitions,
            "levels": [lc.to_dict() for lc in self.levels],
            "verdict": self.verdict,
            "break_even": self.break_even,
            "break_even_basis": self.break_even_basis,
            "adopt_for": self.adopt_for,
            "partial": self.partial,
            "error": self.error,
            "report_dir": str(self.report_dir) if self.report_dir else None,
            "report_files": [str(p) for p in self.report_files],
            "replayed_acceptance": self.replayed.to_dict() if self.replayed else None,
            "runs": {
                "baseline": self.baseline.to_dict() if self.baseline else None,
                "speculative": self.speculative.to_dict() if self.speculative else None,
            },
        }


@dataclass
class Cell:
    label: str
    draft_len: int
    concurrency: int
    speedup: Interval
    tpot_speedup: Interval
    acceptance_rate: float | None
    acceptance_length: float | None
    output_tok_s: float | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "draft_len": self.draft_len,
            "concurrency": self.concurrency,
            "speedup": self.speedup.to_dict(),
            "tpot_speedup": self.tpot_speedup.to_dict(),
            "acceptance_rate": self.acceptance_rate,
            "acceptance_length": self.acceptance_length,
            "output_tok_s": self.output_tok_s,
        }


@dataclass
class TuneResult:
    target: str
    method: str  # per-request | redeploy
    mode: str
    workload: dict[str, Any]
    settings: dict[str, Any]
    concurrency: list[int]
    draft_lens: list[int]
    configs: list[dict[str, Any]] = field(default_factory=list)  # label, draft_len, overrides
    cells: list[Cell] = field(default_factory=list)
    # The baseline, measured before the first configuration, after the last and between every
    # few (in run order); each configuration's `baselines` names the two that bracket it.
    baselines: list[BenchResult] = field(default_factory=list)
    runs: dict[str, BenchResult] = field(default_factory=dict)
    predicted: dict[int, dict[int, float]] = field(default_factory=dict)  # draft_len → concurrency → S
    prediction_error: float | None = None  # median |predicted − measured|
    plan: dict[str, Any] | None = None  # the plan behind `predicted` (its probe included), as JSON
    best: dict[str, Any] | None = None  # the configuration to use at the lowest concurrency
    schedule: dict[int, int] = field(default_factory=dict)
    max_concurrency: int | None = None
    overlay: dict[str, Any] = field(default_factory=dict)
    llmapi_fragment: dict[str, Any] = field(default_factory=dict)
    overlay_path: Path | None = None
    # The tuned draft_len_schedule deployed and measured: concurrency -> {scheduled, best_fixed,
    # best_fixed_label, ratio, ratio_source, and with the best fixed setting measured again:
    # best_fixed_again, ratio_ci} (decide.tune.check_schedule); `schedule_holds`: ratio >=
    # SCHEDULE_GOAL at every level.
    schedule_check: dict[int, dict[str, Any]] = field(default_factory=dict)
    schedule_holds: bool | None = None
    schedule_run: BenchResult | None = None
    report_dir: Path | None = None
    report_files: list[Path] = field(default_factory=list)
    partial: bool = False
    error: str | None = None

    def cell(self, draft_len: int, concurrency: int) -> Cell | None:
        return next(
            (c for c in self.cells if c.draft_len == draft_len and c.concurrency == concurrency), None
        )

    @property
    def baseline(self) -> BenchResult | None:
        """The first baseline run (None before it)."""
        return self.baselines[0] if self.baselines else None

    def baselines_of(self, config: dict[str, Any]) -> list[BenchResult]:
        """The baseline runs a configuration is compared with: those bracketing it in run
        order (fewer when the sweep stopped early), else all."""
        picked = [self.baselines[k] for k in config.get("baselines", ()) if k < len(self.baselines)]
        return picked or list(self.baselines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "tune",
            "target": self.target,
            "method": self.method,
            "mode": self.mode,
            "workload": self.workload,
            "settings": self.settings,
            "concurrency": self.concurrency,
            "draft_lens": self.draft_lens,
            "configs": self.configs,
            "cells": [c.to_dict() for c in self.cells],
            "predicted": {str(g): {str(c): s for c, s in v.items()} for g, v in self.predicted.items()},
            "prediction_error": self.prediction_error,
            "plan": self.plan,
            "best": self.best,
            "schedule": {str(k): v for k, v in self.schedule.items()},
            "max_concurrency": self.max_concurrency,
            "overlay": self.overlay,
            "llmapi_fragment": self.llmapi_fragment,
            "overlay_path": str(self.overlay_path) if self.overlay_path else None,
            "schedule_check": {str(c): v for c, v in self.schedule_check.items()},
            "schedule_holds": self.schedule_holds,
            "report_dir": str(self.report_dir) if self.report_dir else None,
            "report_files": [str(p) for p in self.report_files],
            "partial": self.partial,
            "error": self.error,
            "runs": {k: v.to_dict() for k, v in self.runs.items()},
            "baseline_runs": [b.to_dict() for b in self.baselines],
        }
