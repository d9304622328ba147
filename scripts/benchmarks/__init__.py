"""The registry of sdtk's benchmarks: one entry per question, each writing one marked section of
docs/benchmarks.md (the results page) or docs/lab/benchmarks-history.md (the lab notebook).

Run them with `python scripts/bench.py list` / `python scripts/bench.py run NAME [--quick] [ARGS ...]`.
A benchmark is a module of this package with `main(argv) -> int | None` that parses its own arguments
and hands its section to `_harness.publish` / `_harness.write_section` (never writing docs itself).
To add one: write the module, add a `Benchmark` below, add its two markers to the docs page."""

from __future__ import annotations

from dataclasses import dataclass

RESULTS = "docs/benchmarks.md"
HISTORY = "docs/lab/benchmarks-history.md"


@dataclass(frozen=True)
class Benchmark:
    """One named benchmark: the question it answers, the marked section it writes (`marker` names
    `<!-- MARKER:start -->` … `<!-- MARKER:end -->` in `doc`), the module whose `main(argv)` runs it,
    the arguments always passed first (`preset`), and those that make a seconds-long smoke run (`quick`)."""

    name: str
    question: str
    doc: str
    marker: str
    module: str
    quick: tuple[str, ...]
    preset: tuple[str, ...] = ()


_MEMBOUND_TWINS = (
    "tiny-ngram-membound",
    "tiny-lookahead-membound",
    "tiny-eagle3-membound",
    "tiny-eagle3-tree-membound",
    "tiny-draft-target-membound",
    "tiny-medusa-membound",
)

BENCHMARKS: tuple[Benchmark, ...] = (
    # --- the results page (docs/benchmarks.md) ---
    Benchmark(
        "membound_served",
        "Does speculation pay when the target is memory-bound? Every mode served against the padded baseline.",
        RESULTS, "bench_membound_served", "membound_served",
        quick=("tiny-ngram-membound", "--requests", "2", "--max-tokens", "8"),
    ),
    Benchmark(
        "recipes",
        "Which mode is fastest at its shipped settings (in process, tiny models)?",
        RESULTS, "bench_recipes", "recipes",
        quick=("tiny-ngram", "--runs", "1", "--prompts", "1", "--new-tokens", "8"),
    ),
    Benchmark(
        "recipes_membound",
        "Which mode is fastest at its shipped settings on the memory-bound twin?",
        RESULTS, "bench_recipes_membound", "recipes",
        quick=("--runs", "1", "--prompts", "1", "--new-tokens", "4"),
        preset=_MEMBOUND_TWINS,
    ),
    Benchmark(
        "batching",
        "At what concurrency does speculation stop paying under in-flight batching?",
        RESULTS, "bench_batching", "batching",
        quick=("--levels", "1,2", "--rounds", "1", "--max-tokens", "8", "--no-ab"),
    ),
    Benchmark(
        "membound_plan",
        "What does `sdtk plan` predict, against the served speedup at each concurrency?",
        RESULTS, "bench_membound_plan", "membound_served",
        quick=("tiny-ngram-membound", "--requests", "2", "--max-tokens", "8", "--probe-prompts", "2"),
        preset=("--plan", "--section", "bench_membound_plan"),
    ),
    Benchmark(
        "membound_new_modes",
        "Do SA, PARD and MTP pay on the memory-bound twin, served at concurrency 1?",
        HISTORY, "bench_membound_served_new_modes", "membound_served",
        quick=("--requests", "2", "--max-tokens", "8"),
        preset=(
            "tiny-sa-membound", "tiny-pard-membound", "tiny-mtp-membound", "--concurrency", "1",
            "--out", HISTORY, "--section", "bench_membound_served_new_modes",
        ),
    ),
    Benchmark(
        "yardstick",
        "How exact are sdtk bench's measurements, against an independent client on one deployment?",
        RESULTS, "bench_yardstick", "yardstick",
        quick=("--recipes", "tiny-eagle3", "--rounds", "1", "--requests", "2", "--max-tokens", "8", "--no-compare"),
    ),
    Benchmark(
        "served",
        "What does serving cost against the in-process runtime?",
        RESULTS, "bench_served", "served",
        quick=("--recipes", "tiny-baseline", "--rounds", "1", "--max-tokens", "8"),
    ),
    Benchmark(
        "stress_served",
        "Does a served deployment stay correct under mixed, cancelled and malformed traffic?",
        RESULTS, "stress_served", "stress_served",
        quick=("--recipes", "tiny-baseline", "--requests", "8"),
    ),
    Benchmark(
        "stress_served_faults",
        "What happens when a served deployment breaks, and does the watchdog recover it?",
        RESULTS, "stress_served_faults", "stress_served",
        quick=("--recipes", "tiny-baseline"),
        preset=("--faults",),
    ),
    Benchmark(
        "train_draft",
        "Does `sdtk train-draft` on CPU improve acceptance on a workload the shipped draft does poorly on?",
        RESULTS, "bench_train_draft", "train_draft",
        quick=("tiny-eagle3", "--max-steps", "2", "--max-minutes", "0.5", "--runs", "1", "--new-tokens", "8"),
    ),
    Benchmark(
        "dynamo",
        "Does Dynamo scale out: 2 workers against 1 behind one frontend?",
        RESULTS, "bench_dynamo", "dynamo",
        quick=("--concurrency", "1", "--requests", "2", "--max-tokens", "8", "--warmup", "1", "--rounds", "1"),
    ),
    # --- the lab notebook (docs/lab/benchmarks-history.md) ---
    Benchmark(
        "plan_accuracy",
        "How close is `sdtk plan`'s predicted speedup to the measured one (in process)?",
        HISTORY, "bench_plan", "plan_accuracy",
        quick=("--recipes", "tiny-draft-target", "--probe-prompts", "2", "--measure-prompts", "2",
               "--new-tokens", "8", "--gamma-max", "2"),
    ),
    Benchmark(
        "reference",
        "How fast is the reference runtime against HF transformers' generate?",
        HISTORY, "bench_reference", "reference",
        quick=("--runs", "1", "--new-tokens", "8", "--prompts", "1", "--threads", "1"),
    ),
    Benchmark(
        "forward",
        "How fast is the lean forward against transformers' own, with identical logits?",
        HISTORY, "bench_forward", "forward",
        quick=("--rounds", "1", "--steps", "5", "--context", "20"),
    ),
    Benchmark(
        "schedule",
        "Do plan's batch dimension and tune's schedule match the measured speedup?",
        HISTORY, "bench_schedule", "schedule",
        quick=("--levels", "1,2", "--requests", "2", "--draft-lens", "1"),
    ),
    Benchmark(
        "bls_concurrency",
        "Does draft-target's BLS queue concurrent requests on one instance?",
        HISTORY, "bench_bls_concurrency", "bls_concurrency",
        quick=("--rounds", "1", "--requests", "2", "--max-tokens", "8"),
    ),
    Benchmark(
        "overhead",
        "What does the reference runtime itself cost per step, beside the forwards?",
        HISTORY, "bench_overhead", "overhead",
        quick=("--runs", "1", "--prompts", "1", "--new-tokens", "8"),
    ),
    Benchmark(
        "bls_replay",
        "What does the served BLS loop cost, replayed in process (plan's BLS yardstick)?",
        HISTORY, "bench_bls_replay", "bls_replay",
        quick=("--prompts", "2", "--max-tokens", "8", "--runs", "1"),
    ),
    Benchmark(
        "plan_batched",
        "How far is plan from the in-flight batcher run in process, apart from the serving path?",
        HISTORY, "bench_plan_batched", "plan_batched",
        quick=("tiny-ngram-membound", "--concurrency", "1,2", "--requests", "2", "--max-tokens", "8",
               "--rounds", "1", "--probe-prompts", "2"),
    ),
    Benchmark(
        "twin_step",
        "How does one step of the memory-bound twin's target scale with the tokens it verifies?",
        HISTORY, "bench_twin_step", "twin_step",
        quick=("--inflate", "2", "--reps", "2"),
    ),
)  # fmt: skip

BY_NAME = {b.name: b for b in BENCHMARKS}
