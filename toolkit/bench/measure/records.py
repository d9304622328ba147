"""A run's own records: what the load generator measured against one endpoint, per level.

Plain data (no transport, no load): toolkit.bench.results re-exports them, and the decide layer
reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from toolkit.bench.measure.metrics import RequestRecord, counted_acceptance, summarize


@dataclass
class LevelResult:
    """One concurrency level (or request rate) of a run."""

    concurrency: int | None
    rate: float | None
    records: list[RequestRecord]
    duration: float
    partial: bool = False
    # What the deployment's workers counted during the level (their sdtk_spec_* counters: an
    # OpenAI-API deployment, whose responses carry no acceptance; toolkit.bench.measure.openai).
    server_acceptance: dict[str, Any] | None = None

    @property
    def label(self) -> str:
        return f"c={self.concurrency}" if self.concurrency is not None else f"rate={self.rate:g}/s"

    def summary(self) -> dict[str, Any]:
        s = summarize(self.records, duration=self.duration)
        if self.server_acceptance and not s["acceptance"]["draft_tokens"]:
            s["acceptance"] = counted_acceptance(self.server_acceptance)
        return s

    def to_dict(self, records: bool = False) -> dict[str, Any]:
        d: dict[str, Any] = {
            "concurrency": self.concurrency,
            "rate": self.rate,
            "duration_s": self.duration,
            "partial": self.partial,
            "summary": self.summary(),
        }
        if self.server_acceptance is not None:
            d["server_acceptance"] = self.server_acceptance
        if records:
            d["records"] = [r.to_dict() for r in self.records]
        return d


@dataclass
class BenchResult:
    """What `sdtk bench` measured against one endpoint."""

    endpoint: str
    workload: dict[str, Any]
    settings: dict[str, Any]
    levels: list[LevelResult] = field(default_factory=list)
    partial: bool = False
    error: str | None = None
    warnings: list[str] = field(default_factory=list)
    report_dir: Any = None  # Path, once reports are written
    report_files: list[Any] = field(default_factory=list)
    twin: str | None = None  # "memory-bound twin: target padded ×N, F GB per step" (toolkit.membound)

    def level(self, concurrency: int) -> LevelResult | None:
        return next((lv for lv in self.levels if lv.concurrency == concurrency), None)

    @property
    def token_counts_exact(self) -> bool:
        """False when any successful request's token counts are estimates (--allow-inexact)."""
        return all(r.token_counts_exact for lv in self.levels for r in lv.records if r.ok)

    def to_dict(self, records: bool = False) -> dict[str, Any]:
        return {
            "kind": "bench",
            "endpoint": self.endpoint,
            "token_counts_exact": self.token_counts_exact,
            "workload": self.workload,
            "settings": self.settings,
            "partial": self.partial,
            "error": self.error,
            "warnings": list(self.warnings),
            "twin": self.twin,
            "report_dir": str(self.report_dir) if self.report_dir else None,
            "levels": [lv.to_dict(records) for lv in self.levels],
        }


def count_steps_from_chunks(result: BenchResult | None) -> None:
    """Steps counted from the stream (one chunk per target step) for the speculative requests
    whose step count the server does not report (see targets.Side.steps_from_chunks)."""
    for level in getattr(result, "levels", []):
        for rec in level.records:
            if rec.ok and rec.steps is None and rec.draft_tokens is not None and rec.streamed:
                rec.steps = sum(1 for k in rec.chunk_tokens if k > 0)
                rec.steps_source = "streamed chunks (one per step)"
