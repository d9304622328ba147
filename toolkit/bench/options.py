"""`RunOptions`: the settings bench, compare, tune and plan share, declared once.

Each command's public function (toolkit.bench.api) takes one `opts: RunOptions` (the CLI
builds it once from the shared flags), or, for scripts and notebooks, any of its fields as
keyword arguments (`bench(url, requests=8)`), merged by `RunOptions.of`. One RunOptions goes down
to the layers below: the workload is loaded, the report directory chosen and the load generator
driven from it, in one place each. The defaults live here only.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.errors import UsageError, check_names
from toolkit.progress import Step, quiet, steps

if TYPE_CHECKING:
    from toolkit.bench.decide.predict import PlanResult
    from toolkit.bench.measure.workloads import Workload

DEFAULT_TIMEOUT = 120.0  # seconds a request may take before it counts as failed
PROTOCOLS = ("grpc", "http", "openai")  # openai: /v1/completions (toolkit.bench.measure.openai)


def default_report_dir(workdir: Path | str | None, kind: str) -> Path:
    """<workdir>/reports/<kind>-<UTC timestamp>; workdir defaults to ./workdir."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    return Path(workdir or "workdir") / "reports" / f"{kind}-{stamp}"


@dataclass(frozen=True)
class RunOptions:
    """What to send, how, and where the reports go."""

    workload: str | Workload | None = "code"  # a bundled name, `synthetic`, or a loaded Workload
    prompts_file: str | Path | None = None  # a JSONL of prompts instead of `workload`
    requests: int = 32  # per concurrency level
    duration: float | None = None  # seconds per level (stops earlier than `requests`)
    warmup: int = 2
    seed: int = 0  # prompt order, and request i's sampling seed seed+i
    max_tokens: int | None = None  # overrides every prompt's own
    protocol: str = "grpc"
    temperature: float | None = None
    timeout: float = DEFAULT_TIMEOUT
    report_dir: str | Path | None = None  # default <workdir>/reports/<kind>-<time>
    workdir: str | Path | None = None  # where recipes are deployed, and reports go by default
    # Progress on stderr, as everywhere in sdtk (toolkit.progress): a Step callback for the step
    # messages (`quiet` shows none), or True/False for the default steps / none. The load
    # generator's bars are on unless it is False or `quiet`.
    progress: bool | Step = True
    tokenizer: str | None = None  # counts output tokens when the server does not
    allow_inexact: bool = False  # run without exact token counts (reports say INEXACT)

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise UsageError(f"protocol must be one of {', '.join(PROTOCOLS)}, got '{self.protocol}'")

    @classmethod
    def of(cls, opts: RunOptions | None = None, /, **changes: Any) -> RunOptions:
        """`opts` (default: the defaults) with `changes`; an unknown name is a UsageError."""
        check_names(changes, (f.name for f in dataclasses.fields(cls)), "run option")
        return dataclasses.replace(opts or cls(), **changes)

    def steps(self, component: str) -> Step:
        """The Step that reports this run's step messages (see `progress`)."""
        return step_of(self.progress, component)

    def settings(self, *, duration: bool = True) -> dict[str, Any]:
        """The options a compare or tune report records, in the order their JSON has them."""
        out: dict[str, Any] = {"requests": self.requests, "duration": self.duration}
        if not duration:
            del out["duration"]
        out.update(
            warmup=self.warmup,
            seed=self.seed,
            protocol=self.protocol,
            temperature=self.temperature,
            timeout=self.timeout,
        )
        return out

    def out_dir(self, kind: str, deployment: Path | str | None = None) -> Path:
        """The report directory: `report_dir`, else <workdir or the deployment's>/reports/<kind>-<time>."""
        if self.report_dir:
            return Path(self.report_dir)
        return default_report_dir(self.workdir or deployment, kind)


def step_of(progress: bool | Step, component: str) -> Step:
    """A `progress` given as a Step, or as a bool (True: toolkit.progress.steps(component))."""
    if callable(progress):
        return progress
    return steps(component) if progress else quiet


def bars_enabled(progress: bool | Step) -> bool:
    """Whether progress bars show: on unless progress is False or toolkit.progress.quiet."""
    return progress is not False and progress is not quiet


@dataclass(frozen=True)
class CompareOptions:
    """`bench --compare`'s own settings: the concurrency levels, each side's model name (None:
    its deployment's), the speculative side's draft length when it is a URL, the bootstrap
    (`resamples`, `confidence`), plots in the reports, the in-process replay of the speculative
    side, and the order (`interleave`: level by level; `rounds` > 1: each level's requests in
    that many rounds, the sides alternating, both deployed throughout)."""

    concurrency: Sequence[int] | None = (1, 2, 4)
    baseline_model: str | None = None
    speculative_model: str | None = None
    speculative_draft_len: int | None = None
    resamples: int = 2000
    confidence: float = 0.95
    plots: bool = True
    replay: bool = True
    interleave: bool = False
    rounds: int = 1


@dataclass(frozen=True)
class TuneOptions:
    """`tune`'s own settings: `recipe`, the recipe a URL or workdir target was deployed from;
    `method`: per-request, redeploy or auto; the draft lengths to sweep (None: the mode's); the
    concurrency levels; the model name; `resamples`; a `plan_result` to predict from (else
    `predict` runs `plan` where it can); `check`: measure the tuned schedule against the best
    fixed draft length (redeploy on the reference backend)."""

    recipe: str | Path | None = None
    method: str = "auto"
    draft_lens: Sequence[int] | None = None
    concurrency: Sequence[int] | None = (1, 2, 4)
    model: str | None = None
    resamples: int = 2000
    plan_result: PlanResult | None = None
    predict: bool = True
    check: bool = True


def split_changes(changes: dict[str, Any], cls: type) -> tuple[dict[str, Any], dict[str, Any]]:
    """A command's keyword arguments as (those named after `cls`'s fields, the rest: RunOptions')."""
    names = {f.name for f in dataclasses.fields(cls)}
    return (
        {k: v for k, v in changes.items() if k in names},
        {k: v for k, v in changes.items() if k not in names},
    )
