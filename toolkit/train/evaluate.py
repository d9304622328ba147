"""Before/after numbers on the hold-out split, with the code `sdtk plan` runs (toolkit.bench.api.plan):
acceptance per draft position, τ (tokens per target step) and the plan-predicted speedup at
concurrency 1, all measured by the reference runtime on this CPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolkit.bench.api import plan
from toolkit.recipe import load_recipe


def holdout_metrics(
    recipe: Path, holdout_file: Path, *, tokens: int, seed: int, threads: int | None = 1
) -> dict[str, Any]:
    rec = load_recipe(recipe)
    n = sum(1 for line in Path(holdout_file).read_text().splitlines() if line.strip())
    draft_len = _draft_len(rec)  # plan probes chains up to it; trees and windows probe their own shapes
    res = plan(
        recipe,
        prompts_file=holdout_file,
        workload=None,
        probe=True,
        probe_prompts=n,
        probe_tokens=tokens,
        draft_len_max=draft_len,  # bench's name for the longest draft length
        concurrency=(1,),
        threads=threads,
        seed=seed,
        progress=False,
        fetch="none",
    )
    if res.probe is None or not res.probe.configs:
        raise RuntimeError(f"plan ran no acceptance probe for {recipe}: {res.notes}")
    # the recipe's own configuration among the probed ones (γ for a chain, the whole tree for Medusa)
    own = [
        c
        for c in res.probe.configs
        if all(getattr(rec.speculative, k, None) == v for k, v in c.settings.items())
    ]
    cfg = own[0] if own else res.probe.configs[0]
    pred = next(
        (p for p in res.predictions if p.settings == cfg.settings),
        max(res.predictions, key=lambda p: p.speedup[1]) if res.predictions else None,
    )
    return {
        "recipe": str(recipe),
        "config": cfg.label,
        "prompts": res.probe.prompts,
        "new_tokens": res.probe.new_tokens,
        "per_position_acceptance": [round(a, 4) for a in cfg.per_position_acceptance],
        "acceptance_rate": round(cfg.acceptance_rate, 4),
        "tau": round(cfg.acceptance_length, 4),
        "predicted_speedup": round(pred.speedup[1], 4) if pred else None,
        "predicted_tau": round(pred.expected_tokens, 4) if pred else None,
        "basis": res.basis,
    }


def _draft_len(rec: Any) -> int:
    return max(1, int(rec.speculative.draft_len))
