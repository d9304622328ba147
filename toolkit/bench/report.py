"""Reports: human text for the terminal, JSON/CSV/PNG/YAML files for the record.

All rendering and writing of bench, compare, plan and tune results is here; the results
themselves (toolkit.bench.results, decide.predict.PlanResult) do not know how they are shown.
`render(result)` is the text of any of them, `write_reports(result, out_dir)` its files.

Files are written atomically (`<name>.incomplete`, then os.replace), so a killed run never
leaves a half-written report behind. Plots use matplotlib's Agg backend (no display needed).
"""

from __future__ import annotations

import csv
import io
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from toolkit._fs import atomic_path, atomic_write
from toolkit.bench.decide.predict import PlanResult
from toolkit.bench.options import default_report_dir
from toolkit.bench.results import ABResult, BenchResult, TuneResult

__all__ = ["default_report_dir", "render", "write_reports"]

SYNTHETIC_BANNER = "WARNING synthetic: unrealistic for acceptance (random words, not language)"
INEXACT_BANNER = (
    "INEXACT token counts: neither the server nor a tokenizer counted tokens; one token per chunk "
    "was assumed, so tok/s, TPOT and ITL are off by the tokens per chunk (--allow-inexact)"
)


def counts_label(summary: dict[str, Any]) -> str:
    """How a level's tokens were counted, for tables and CSV: server, tokenizer or INEXACT."""
    if not summary.get("token_counts_exact", True):
        return "INEXACT"
    return str(summary.get("token_count_source") or "server")


def render(result: BenchResult | ABResult | PlanResult | TuneResult) -> str:
    """The terminal text of any bench / compare / plan / tune result."""
    if isinstance(result, BenchResult):
        return render_bench(result)
    if isinstance(result, ABResult):
        return render_compare(result)
    if isinstance(result, PlanResult):
        return render_plan(result)
    if isinstance(result, TuneResult):
        return render_tune(result)
    raise TypeError(f"no report for {type(result).__name__}")


def write_reports(
    result: BenchResult | ABResult | TuneResult, out_dir: Path, *, plots: bool = True
) -> list[Path]:
    """Every file of a result (complete or partial) into `out_dir`; returns their paths."""
    if isinstance(result, BenchResult):
        return write_bench_reports(result, out_dir)
    if isinstance(result, ABResult):
        return write_compare_reports(result, out_dir, plots=plots)
    if isinstance(result, TuneResult):
        return write_tune_reports(result, out_dir)
    raise TypeError(f"no report files for {type(result).__name__}")


# --------------------------------------------------------------------------- writers


def write_json(path: Path, data: Any) -> Path:
    return atomic_write(path, json.dumps(data, indent=2, default=_json_default) + "\n")


def _json_default(o: Any) -> Any:
    if hasattr(o, "to_dict"):
        return o.to_dict()
    if isinstance(o, Path):
        return str(o)
    return str(o)


def write_csv(path: Path, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> Path:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(columns)
    for r in rows:
        w.writerow(["" if v is None else (f"{v:.6g}" if isinstance(v, float) else v) for v in r])
    return atomic_write(path, buf.getvalue())


def write_records_jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> Path:
    return atomic_write(path, "".join(json.dumps(r, default=_json_default) + "\n" for r in rows))


# --------------------------------------------------------------------------- text helpers


def table(columns: Sequence[str], rows: Sequence[Sequence[Any]], indent: str = "  ") -> str:
    """A plain aligned text table (no colour: stdout may be piped)."""
    cells = [[str(c) for c in columns]] + [["-" if v is None else str(v) for v in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    lines = []
    for k, row in enumerate(cells):
        lines.append(
            indent + "  ".join(v.rjust(w) if k else v.ljust(w) for v, w in zip(row, widths, strict=True))
        )
        if k == 0:
            lines.append(indent + "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:.1f}"


def num(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


# --------------------------------------------------------------------------- bench


def bench_rows(result: BenchResult) -> tuple[list[str], list[list[Any]]]:
    cols = [
        "level",
        "ok",
        "errors",
        "tok/s",
        "req/s",
        "ttft p50 ms",
        "ttft p90 ms",
        "tpot p50 ms",
        "tpot p90 ms",
        "itl p50 ms",
        "itl p99 ms",
        "chunk gap p50 ms",
        "tok/chunk",
        "e2e p50 s",
        "e2e p99 s",
        "user tok/s",
        "accept rate",
        "accept len",
        "token counts",
    ]
    rows = []
    for lv in result.levels:
        s = lv.summary()
        acc = s["acceptance"]
        rows.append(
            [
                lv.label + (" (partial)" if lv.partial else ""),
                s["ok"],
                s["errors"],
                num(s["output_tok_s"], 1),
                num(s["req_s"], 2),
                ms(s["ttft_s"]["p50"]),
                ms(s["ttft_s"]["p90"]),
                ms(s["tpot_s"]["p50"]),
                ms(s["tpot_s"]["p90"]),
                ms(s["itl_s"]["p50"]),
                ms(s["itl_s"]["p99"]),
                ms(s["chunk_interval_s"]["p50"]),
                num(s["tokens_per_chunk"]["mean"], 2),
                num(s["e2e_s"]["p50"], 3),
                num(s["e2e_s"]["p99"], 3),
                num(s["user_tok_s"]["mean"], 1),
                num(acc["rate"], 3),
                num(acc["length"], 2),
                counts_label(s),
            ]
        )
    return cols, rows


def render_bench(result: BenchResult) -> str:
    out = [
        f"sdtk bench: {result.endpoint}  workload {result.workload['name']} ({result.workload['prompts']} prompts)"
    ]
    if result.twin:
        out.append(result.twin)
    if result.workload.get("synthetic"):
        out.append(SYNTHETIC_BANNER)
    out += result.workload.get("notes", [])
    if not result.token_counts_exact:
        out.append(INEXACT_BANNER)
    cols, rows = bench_rows(result)
    out.append(table(cols, rows))
    for lv in result.levels:
        s = lv.summary()
        if s["server_check"]["violations"]:
            out.append(
                f"  note {lv.label}: {s['server_check']['violations']} requests where the server's duration "
                "exceeds the client's: check clocks / timestamps"
            )
        if s["error_kinds"]:
            out.append(f"  errors {lv.label}: " + ", ".join(f"{k} {v}" for k, v in s["error_kinds"].items()))
    if result.partial:
        out.append(f"PARTIAL: {result.error}")
    return "\n".join(out)


def write_bench_reports(result: BenchResult, out_dir: Path) -> list[Path]:
    out_dir = Path(out_dir)
    paths = [write_json(out_dir / "bench.json", result.to_dict())]
    cols, rows = bench_rows(result)
    paths.append(write_csv(out_dir / "bench.csv", cols, rows))
    recs = [dict(r.to_dict(), level=lv.label) for lv in result.levels for r in lv.records]
    paths.append(write_records_jsonl(out_dir / "requests.jsonl", recs))
    return paths


# --------------------------------------------------------------------------- compare


def compare_rows(ab: ABResult) -> tuple[list[str], list[list[Any]]]:
    cols = [
        "concurrency",
        "speedup (user tok/s)",
        "95% CI",
        "tpot speedup",
        "throughput ratio",
        "base tpot p50 ms",
        "spec tpot p50 ms",
        "base ttft p50 ms",
        "spec ttft p50 ms",
        "accept rate",
        "accept len",
        "pairs",
        "token counts",
    ]
    rows = []
    for lc in ab.levels:
        sp = lc.speedup
        rows.append(
            [
                lc.concurrency,
                num(sp.point),
                f"[{num(sp.lo)}, {num(sp.hi)}]",
                num(lc.tpot_speedup.point),
                num(lc.throughput_ratio),
                ms(lc.baseline["tpot_s"]["p50"]),
                ms(lc.speculative["tpot_s"]["p50"]),
                ms(lc.baseline["ttft_s"]["p50"]),
                ms(lc.speculative["ttft_s"]["p50"]),
                num(lc.speculative["acceptance"]["rate"], 3),
                num(lc.speculative["acceptance"]["length"], 2),
                lc.pairs,
                "/".join(dict.fromkeys(counts_label(x) for x in (lc.baseline, lc.speculative))),
            ]
        )
    return cols, rows


def render_compare(ab: ABResult) -> str:
    out = [
        f"sdtk bench --compare: baseline {ab.baseline_label}  vs  speculative {ab.speculative_label}",
        f"workload {ab.workload['name']} ({ab.workload['prompts']} prompts), {ab.settings['requests']} requests "
        f"per level, seed {ab.settings['seed']}"
        + (f"; order: {ab.settings['order']}" if "order" in ab.settings else ""),
    ]
    if ab.workload.get("synthetic"):
        out.append(SYNTHETIC_BANNER)
    out += ab.workload.get("notes", [])
    if not ab.token_counts_exact:
        out.append(INEXACT_BANNER)
    cols, rows = compare_rows(ab)
    out.append(table(cols, rows))
    out.append(f"speedup = {ab.definitions['speedup']}")
    per_pos = [(lc.concurrency, lc.speculative.get("acceptance", {}).get("per_position")) for lc in ab.levels]
    if any(p for _, p in per_pos):
        out.append("acceptance per draft position (P(positions 1..k all accepted)):")
        width = max(len(p) for _, p in per_pos if p)
        out.append(
            table(
                ["concurrency", *(f"pos {k + 1}" for k in range(width))],
                [[c, *(num(x) for x in p), *([""] * (width - len(p)))] for c, p in per_pos if p],
            )
        )
    rp = ab.replayed
    if rp is not None and rp.per_position:
        agree = {True: "equal to", False: "DIFFERENT from", None: "no server counts to compare with"}[
            rp.matches_server
        ]
        server = (
            f" the server's {rp.server_accepted_draft_tokens}/{rp.server_draft_tokens}"
            if rp.matches_server is not None
            else ""
        )
        out.append(
            f"acceptance per draft position, {rp.source}, {rp.requests} requests "
            f"(accepted/proposed {rp.accepted_draft_tokens}/{rp.draft_tokens}, {agree}{server}):"
        )
        out.append(
            table([f"pos {k + 1}" for k in range(len(rp.per_position))], [[num(x) for x in rp.per_position]])
        )
    out.append(f"verdict: {ab.verdict}")
    if ab.partial:
        out.append(f"PARTIAL: {ab.error}")
    if ab.report_dir:
        out.append(f"reports: {ab.report_dir}")
    for path in ab.report_files:
        if Path(path).suffix == ".png":
            out.append(f"plot: {path}")
    return "\n".join(out)


def write_compare_reports(ab: ABResult, out_dir: Path, plots: bool = True) -> list[Path]:
    out_dir = Path(out_dir)
    paths = [write_json(out_dir / "compare.json", ab.to_dict())]
    cols, rows = compare_rows(ab)
    paths.append(write_csv(out_dir / "compare.csv", cols, rows))
    recs = []
    for side, res in (("baseline", ab.baseline), ("speculative", ab.speculative)):
        if res is not None:
            recs += [dict(r.to_dict(), side=side, level=lv.label) for lv in res.levels for r in lv.records]
    paths.append(write_records_jsonl(out_dir / "requests.jsonl", recs))
    if plots and ab.levels:
        paths += plot_compare(ab, out_dir)
    return paths


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def plot_compare(ab: ABResult, out_dir: Path) -> list[Path]:
    plt = _plt()
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    conc = [lc.concurrency for lc in ab.levels]
    title_extra = " (synthetic workload)" if ab.workload.get("synthetic") else ""
    if not ab.token_counts_exact:
        title_extra += " (INEXACT token counts)"

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for key, ax, name in (("tpot_s", axes[0], "TPOT"), ("ttft_s", axes[1], "TTFT")):
        for side, style in (("baseline", "o-"), ("speculative", "s-")):
            p50 = [(lc.baseline if side == "baseline" else lc.speculative)[key]["p50"] for lc in ab.levels]
            p90 = [(lc.baseline if side == "baseline" else lc.speculative)[key]["p90"] for lc in ab.levels]
            ax.plot(
                conc, [v * 1e3 if v is not None else float("nan") for v in p50], style, label=f"{side} p50"
            )
            ax.plot(
                conc,
                [v * 1e3 if v is not None else float("nan") for v in p90],
                style,
                alpha=0.4,
                label=f"{side} p90",
            )
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency")
        ax.set_ylabel(f"{name} (ms)")
        ax.set_title(f"{name} vs concurrency{title_extra}")
        ax.legend(fontsize=8)
    fig.tight_layout()
    paths.append(_save(fig, out_dir / "latency_vs_concurrency.png"))
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    pts = [(lc.concurrency, lc.speedup) for lc in ab.levels if lc.speedup.point is not None]
    if pts:
        xs = [c for c, _ in pts]
        ys = [i.point for _, i in pts]
        lo = [i.point - i.lo if i.point is not None and i.lo is not None else 0 for _, i in pts]
        hi = [i.hi - i.point if i.point is not None and i.hi is not None else 0 for _, i in pts]
        ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o-", capsize=4, label="speedup (95% CI)")
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    if ab.break_even is not None:
        ax.axvline(ab.break_even, color="red", linestyle=":", label=f"break-even {ab.break_even}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("concurrency")
    ax.set_ylabel("speedup (per-user output tok/s)")
    ax.set_title(f"speculative ÷ baseline{title_extra}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    paths.append(_save(fig, out_dir / "speedup_vs_concurrency.png"))
    plt.close(fig)

    per_pos = [(f"c={lc.concurrency}", lc.speculative["acceptance"].get("per_position")) for lc in ab.levels]
    per_pos = [(c, p) for c, p in per_pos if p]
    if not per_pos and ab.replayed is not None and ab.replayed.per_position:
        per_pos = [("in-process replay", ab.replayed.per_position)]
    if per_pos:
        fig, ax = plt.subplots(figsize=(6, 4))
        width = 0.8 / len(per_pos)
        for k, (c, p) in enumerate(per_pos):
            ax.bar([i + 1 + k * width for i in range(len(p))], p, width=width, label=c)
        ax.set_xlabel("draft position")
        ax.set_ylabel("P(accepted through this position)")
        ax.set_ylim(0, 1)
        ax.set_title("acceptance per draft position")
        ax.legend(fontsize=8)
        fig.tight_layout()
        paths.append(_save(fig, out_dir / "acceptance_per_position.png"))
        plt.close(fig)
    return paths


def _save(fig: Any, path: Path) -> Path:
    with atomic_path(path, tmp_name=path.stem + ".incomplete.png") as tmp:
        fig.savefig(tmp, dpi=110)
    return path


# --------------------------------------------------------------------------- plan


def render_plan(p: PlanResult) -> str:
    out = [f"sdtk plan: {p.recipe}  mode {p.mode}  backend {p.backend}"]
    if p.probe is not None:
        pr = p.probe
        t = pr.timing
        out.append(
            f"probe: {pr.prompts} prompts × {pr.new_tokens} tokens of '{pr.workload['name']}' at T={pr.temperature:g} "
            f"in {pr.seconds:.1f}s"
        )
        if pr.workload.get("synthetic"):
            out.append(SYNTHETIC_BANNER)
        out += pr.workload.get("notes", [])
        line = f"  costs: plain step {t.t_base * 1e3:.2f} ms, κ={t.kappa:.3f} (verify-cost slope per extra token)"
        if t.c_forward is not None:
            line += f", c={t.c_forward:.3f} (draft ÷ target forward)"
        out.append(line)
        if pr.alpha_greedy is not None:
            out.append(
                f"  α greedy (argmax agreement) = {pr.alpha_greedy.point:.3f} "
                f"[{num(pr.alpha_greedy.lo, 3)}, {num(pr.alpha_greedy.hi, 3)}]"
            )
        if pr.alpha_logits is not None:
            out.append(
                f"  α = E[Σ min(p,q)] at T={pr.alpha_logits_temperature:g} = {pr.alpha_logits.point:.3f} "
                f"[{num(pr.alpha_logits.lo, 3)}, {num(pr.alpha_logits.hi, 3)}]"
            )
        for c in pr.configs:
            pos = ", ".join(f"{m:.2f}" for m in c.per_position_acceptance)
            out.append(
                f"  {c.label}: τ={c.acceptance_length:.2f}, accept rate {c.acceptance_rate:.3f}, "
                f"step {c.t_step * 1e3:.2f} ms; per position [{pos}]"
            )
    if p.predictions:
        out.append(f"predicted speedup (mean per-request output tok/s, as bench --compare), {p.basis}:")
        out.append(_pred_table(p.predictions, p.concurrency, iid=True))
    if p.roofline_predictions:
        out.append(
            f"predicted speedup on the GPU roofline ({p.sizing.gpu.name if p.sizing else ''}), same acceptance:"
        )
        out.append(_pred_table(p.roofline_predictions, p.concurrency))
    if p.assumed:
        out.append("ASSUMED acceptance (not measured), best γ per α on the GPU roofline:")
        out.append(_pred_table(p.assumed, p.concurrency))
    if p.sizing is not None:
        s = p.sizing
        out.append(
            f"sizing on {s.gpu.name} ({s.gpu.memory_gb:g} GB, {s.gpu.bandwidth_tbs:g} TB/s), dtype {s.dtype}:"
        )
        for comp in s.components:
            out.append(
                f"  {comp.role} {comp.ref}: {comp.params / 1e9:.3f}B params"
                f"{' (estimated)' if comp.params_estimated else ''}, facts from {comp.facts_source}"
            )
        out.append(
            f"  weights {s.weights_bytes / 1e9:.2f} GB, KV {s.kv_bytes_per_token:,.0f} bytes/token, "
            f"max_seq_len {s.max_seq_len}"
        )
        rows = [
            [
                f.tp,
                num(f.weights_gb_per_gpu),
                num(f.kv_budget_gb_per_gpu),
                f.max_sequences,
                "yes" if f.fits else "no",
                num(f.decode_tok_s_roofline, 0),
                num(f.decode_tok_s_spec_roofline, 0),
                f.note,
            ]
            for f in s.fits
        ]
        out.append(
            table(
                [
                    "tp",
                    "weights GB/GPU",
                    "KV GB/GPU",
                    "max seqs",
                    "fits",
                    "tok/s b1 roofline",
                    f"spec tok/s (τ={num(s.tau)})",
                    "note",
                ],
                rows,
            )
        )
        out.append("  assumptions: " + "; ".join(s.assumptions))
    r = p.recommendation
    if r is not None:
        out.append(
            f"recommendation ({r.basis}): {r.label}, predicted {r.predicted_speedup:.2f}× at concurrency "
            f"{p.concurrency[0]}" + (f"; break-even at {r.break_even}" if r.break_even else "")
        )
        if r.schedule:
            out.append(f"  draft_len_schedule {r.schedule}, max_concurrency {r.max_concurrency}")
    for n in p.notes:
        out.append(f"note: {n}")
    return "\n".join(out)


def _pred_table(preds: Sequence[Any], conc: Sequence[int], iid: bool = False) -> str:
    cols = ["config", "draft len", "E[tokens/step]"] + [f"c={c}" for c in conc]
    if iid:
        cols += ["E iid(α)", f"Leviathan c={conc[0]}"]
    rows = []
    for pr in preds:
        row = [pr.label, pr.draft_len, num(pr.expected_tokens)] + [num(pr.speedup.get(c)) for c in conc]
        if iid:
            row += [num(pr.expected_tokens_iid), num((pr.speedup_iid or {}).get(conc[0]))]
        rows.append(row)
    return table(cols, rows)


# --------------------------------------------------------------------------- tune


def _tune_rows(t: TuneResult) -> list[tuple[int, str | None]]:
    """(draft length, the label of a configuration that also sets the mode's knob, else None) per
    row of tune's table: each draft length once, then each knob configuration."""
    knobs: list[tuple[int, str | None]] = [
        (int(c["draft_len"]), str(c["label"])) for c in t.configs if "knob" in c
    ]
    return [(g, None) for g in dict.fromkeys(t.draft_lens)] + knobs


def render_tune(t: TuneResult) -> str:
    out = [f"sdtk tune: {t.target}  workload {t.workload['name']}  method {t.method}"]
    if t.workload.get("synthetic"):
        out.append(SYNTHETIC_BANNER)
    out += t.workload.get("notes", [])
    cols = (
        ["draft len"]
        + [f"c={c}" for c in t.concurrency]
        + ["predicted c=" + str(t.concurrency[0]), "accept len"]
    )
    rows = []
    for g, knob in _tune_rows(t):
        by_level = {c.concurrency: c for c in t.cells if c.draft_len == g and c.label == knob} if knob else {}
        row: list[Any] = [f"{g} ({knob.split(' ')[0]})" if knob else g]
        for c in t.concurrency:
            cell = by_level.get(c) if knob else t.cell(g, c)
            row.append(cell.speedup.fmt() if cell is not None else "-")
        pred = t.predicted.get(g, {}).get(t.concurrency[0]) if t.predicted and not knob else None
        row.append(num(pred))
        cell0 = by_level.get(t.concurrency[0]) if knob else t.cell(g, t.concurrency[0])
        row.append(num(cell0.acceptance_length) if cell0 else "-")
        rows.append(row)
    out.append(table(cols, rows))
    out.append(
        f"best per concurrency: {t.schedule}  (0 = speculation off); max_concurrency {t.max_concurrency}"
    )
    if t.schedule_check:
        out.append(
            "schedule check (the tuned draft_len_schedule deployed; goal ≥ 0.95 of the best fixed "
            f"setting at every level): {'holds' if t.schedule_holds else 'DOES NOT hold'}"
        )
        for c, v in sorted(t.schedule_check.items()):
            ratio, ci, again = v["ratio"], v.get("ratio_ci") or {}, v.get("best_fixed_again")
            bounds = None not in (ci.get("lo"), ci.get("hi"))
            out.append(
                f"  c={c}: schedule {v['scheduled']:.2f}× vs best fixed {v['best_fixed_label']} "
                f"{v['best_fixed']:.2f}× in the sweep"
                + (f", {again:.2f}× measured again" if again is not None else "")
                + (f" → {ratio:.2f}" if ratio is not None else "")
                + (f" [{ci['lo']:.2f}, {ci['hi']:.2f}]" if bounds else "")
                + (", paired" if schedule_ratio_source(v) == "paired" else ", against the sweep's cell")
            )
    if t.prediction_error is not None:
        out.append(f"plan vs measured: median |predicted − measured| = {t.prediction_error:.3f}")
        if t.settings.get("serving_overhead_ms"):
            levels = t.settings["serving_overhead_ms_by_concurrency"]
            per = ", ".join(f"{o:.2f} ms at c={c}" for c, o in sorted(levels.items()))
            out.append(
                f"  plan predicted the served speedup: + {per} per step (the baseline's TPOT − the "
                "in-process plain step at that batch), amortised over τ tokens"
            )
    if t.overlay_path:
        out.append(f"recipe overlay: {t.overlay_path}")
    if t.partial:
        out.append(f"PARTIAL: {t.error}")
    return "\n".join(out)


# --------------------------------------------------------------------------- tune files


def write_tune_reports(result: TuneResult, out_dir: Path) -> list[Path]:
    out_dir = Path(out_dir)
    paths = [write_json(out_dir / "tune.json", result.to_dict())]
    rows = [
        [
            c.label,
            c.draft_len,
            c.concurrency,
            c.speedup.point,
            c.speedup.lo,
            c.speedup.hi,
            c.tpot_speedup.point,
            c.acceptance_rate,
            c.acceptance_length,
            c.output_tok_s,
            result.predicted.get(c.draft_len, {}).get(c.concurrency),
        ]
        for c in result.cells
    ]
    paths.append(
        write_csv(
            out_dir / "tune.csv",
            [
                "config",
                "draft_len",
                "concurrency",
                "speedup",
                "ci_lo",
                "ci_hi",
                "tpot_speedup",
                "acceptance_rate",
                "acceptance_length",
                "output_tok_s",
                "predicted",
            ],
            rows,
        )
    )
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    if result.overlay:
        head = (
            f"# sdtk tune {stamp}: best measured setting for {result.settings.get('recipe')} at concurrency "
            f"{min(result.concurrency)} on workload {result.workload['name']}.\n"
            f"# Apply with: sdtk deploy RECIPE "
            + " ".join(f"--set {o}" for o in (result.best or {}).get("overrides", []))
            + "\n"
        )
        result.overlay_path = atomic_write(
            out_dir / "recipe-overlay.yaml", head + yaml.safe_dump(result.overlay, sort_keys=False)
        )
        paths.append(result.overlay_path)
    if result.llmapi_fragment:
        head = (
            f"# sdtk tune {stamp}: TensorRT-LLM LLM-API speculative_config fragment (model.yaml / --config):\n"
            "# draft_len_schedule maps concurrency to draft length (0 = speculation off), with a key at\n"
            "# the first and the last concurrency of each run: TensorRT-LLM 1.2 (keys are lower bounds)\n"
            "# and 1.3 (upper bounds) read it alike; above its largest key, 1.3 does not speculate.\n"
        )
        paths.append(
            atomic_write(
                out_dir / "llmapi-speculative.yaml",
                head + yaml.safe_dump(result.llmapi_fragment, sort_keys=False),
            )
        )
    paths.append(atomic_write(out_dir / "tune.txt", render_tune(result) + "\n"))
    return paths


def schedule_ratio_source(check: dict[str, Any]) -> str:
    """How a tune.json schedule-check level's ratio was measured: `ratio_source` ("paired": the
    schedule and a fresh run of the best fixed setting over the same requests; "sweep": against
    the sweep's cell). Files from before it was written: paired exactly when there is a CI."""
    source = check.get("ratio_source")
    if source:
        return str(source)
    ci = check.get("ratio_ci") or {}
    return "paired" if None not in (ci.get("lo"), ci.get("hi")) else "sweep"
