"""The text `sdtk train-draft` prints: what was trained, and the hold-out numbers before and after."""

from __future__ import annotations

from typing import Any


def _row(name: str, m: dict[str, Any]) -> str:
    acc = " ".join(f"{a:.3f}" for a in m["per_position_acceptance"])
    sp = m.get("predicted_speedup")
    return (
        f"  {name:<7} τ {m['tau']:.3f}   per position [{acc}]   predicted speedup {sp:.3f}×"
        if sp
        else (f"  {name:<7} τ {m['tau']:.3f}   per position [{acc}]")
    )


def render(result: Any) -> str:
    d = result.to_dict()
    tr, data = d["training"], d["data"]
    lines = [
        f"sdtk train-draft {d['recipe']} ({d['mode']})",
        f"data: {data['workload']}: {data['train_prompts']} training prompts, {data['holdout_prompts']} held out; "
        f"self-distillation {data['self_distillation']['tokens']} tokens"
        + (" (cached)" if data["self_distillation"].get("cached") else ""),
        f"trained: {tr['steps']} steps"
        + (f" (resumed from {tr['resumed_from']})" if tr.get("resumed_from") else "")
        + f", stopped by {tr['stopped']}, {tr['seconds']} s, final loss (avg) {tr['final_loss_ema']}",
        f"hold-out ({d['holdout']['before']['prompts']} prompts × {d['holdout']['before']['new_tokens']} tokens, "
        f"{d['holdout']['before']['config']}, plan's probe):",
        _row("before", d["holdout"]["before"]),
        _row("after", d["holdout"]["after"]),
    ]
    if d["holdout"]["tau_ratio"]:
        lines.append(f"  τ after / before: {d['holdout']['tau_ratio']:.3f}")
    lines += [
        f"head: {d['artifact']}",
        f"overlay recipe: {d['overlay']}",
        f"report: {d['report']}",
    ]
    return "\n".join(lines)
