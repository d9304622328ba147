"""Benchmarks of scripts/bench.py (recipes, overhead, bls_replay, forward, membound_served) and
scripts/readme_plot.py on the real tiny models (tiny budgets: these check what they write, not the speed)."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _script(name: str):
    """scripts/NAME.py, loaded from its file (a script that is not a registered benchmark)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _benchmark(name: str, monkeypatch):
    """scripts/benchmarks/NAME.py, imported as `scripts/bench.py run` imports it."""
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    return importlib.import_module(f"benchmarks.{name}")


def test_bench_recipes_section(tmp_path, capsys, monkeypatch):
    mod = _benchmark("recipes", monkeypatch)
    out = tmp_path / "benchmarks.md"
    out.write_text("# b\n\nbefore\n\n<!-- bench_recipes:start -->\nold\n<!-- bench_recipes:end -->\nafter\n")
    args = [
        "tiny-ngram",
        "tiny-medusa:speculative.medusa_choices=[[0],[0,0]]",
        "--runs",
        "1",
        "--prompts",
        "2",
    ]
    assert mod.main([*args, "--new-tokens", "8", "--out", str(out)]) == 0
    text = out.read_text()
    assert text.startswith("# b\n\nbefore\n") and text.endswith("<!-- bench_recipes:end -->\nafter\n")
    assert "old" not in text and "2 code prompts × 8 new tokens" in text
    rows = {
        line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if line.startswith("| tiny")
    }
    assert set(rows) == {"tiny-ngram", "tiny-medusa:speculative.medusa_choices=[[0],[0,0]]"}
    assert (
        "| ngram | γ = 5 |" in rows["tiny-ngram"]
        and "tree 2 nodes" in rows[next(r for r in rows if "medusa" in r)]
    )
    with pytest.raises(SystemExit):  # recipes must share one target
        mod.main(["tiny-ngram", "llama-3.1-8b-ngram", "--no-write"])
    # The memory-bound twin (×2 here, for speed) writes its own, labelled section.
    twin = ["tiny-ngram-membound:reference.inflate=2", "--runs", "1", "--prompts", "1", "--new-tokens", "4"]
    assert mod.main([*twin, "--out", str(out)]) == 0
    text = out.read_text()
    assert "<!-- bench_recipes:end -->\nafter\n" in text and "| tiny-ngram | ngram |" in text
    section = text.split("<!-- bench_recipes_membound:start -->")[1].split(
        "<!-- bench_recipes_membound:end -->"
    )[0]
    assert "**memory-bound twin: target padded ×2, " in section and "| tiny-ngram-membound:" in section
    with pytest.raises(SystemExit):  # ... and one reference.inflate
        mod.main(["tiny-ngram", "tiny-ngram-membound", "--no-write"])


def test_readme_section_from_a_compare_json(tmp_path):
    mod = _script("readme_plot")
    iv = {"point": 1.5, "lo": 1.2, "hi": 1.8}
    level = {
        "concurrency": 1,
        "speedup": iv,
        "tpot_speedup": iv,
        "throughput_ratio": 1.4,
        "speculative": {"acceptance": {"rate": 0.5, "length": 2.5}},
    }
    d = {
        "baseline": "recipes/tiny-baseline.yaml (recipe)",
        "speculative": "workdir/demo/tiny-ngram (workdir)",
        "settings": {"requests": 12},
        "workload": {},
        "levels": [level, dict(level, concurrency=2)],
        "verdict": "speculative is 1.50× faster",
        "replayed_acceptance": {"per_position": [0.6, 0.4]},
    }
    cj = tmp_path / "compare.json"
    cj.write_text(json.dumps(d))
    readme = tmp_path / "README.md"
    readme.write_text("top\n<!-- demo_ab:start -->\n<!-- demo_ab:end -->\nbottom\n")
    png = tmp_path / "demo_ab.png"
    mod.PNG = png
    assert (
        mod.main(["--compare-json", str(cj), "--readme", str(readme), "--source", "./scripts/demo.sh"]) == 0
    )
    text = readme.read_text()
    assert text.startswith("top\n") and text.endswith("<!-- demo_ab:end -->\nbottom\n")
    assert (
        "`tiny-ngram` against `tiny-baseline`" in text
        and "From the compare.json of `./scripts/demo.sh`" in text
    )
    assert "| 2 | **1.50×** | [1.20, 1.80] | 1.50× | 1.40× | 0.50 | 2.50 |" in text
    assert "0.60, 0.40" in text and "Verdict: speculative is 1.50× faster" in text
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_overhead_splits_cpu_time_into_forwards_and_the_rest(tmp_path, monkeypatch):
    import argparse

    mod = _benchmark("overhead", monkeypatch)
    args = argparse.Namespace(
        models=Path(__file__).resolve().parents[2] / "models" / "tiny",
        threads=1,
        prompts=1,
        new_tokens=6,
        modes=["none", "eagle3_tree"],
        runs=1,
    )
    one = mod.worker(args)
    for mode in args.modes:
        d = one[mode]
        assert d["tokens"] == 6 and 1 <= d["steps"] <= 6 and 0 < d["forwards"] < d["wall"]
        assert d["calls"] >= 2 * d["steps"] and d["clock_cost"] >= 0
    # Two trees: the second is reported as a ratio of overhead per step against the first (overhead
    # = CPU time − forwards − hooked calls × the clock's own cost per call).
    other = {
        m: {**d, "wall": d["wall"] + d["wall"] - d["forwards"] - d["calls"] * d["clock_cost"]}
        for m, d in one.items()
    }
    trees = [tmp_path / "old", mod.REPO]
    text = mod._section(args, trees, {trees[0]: [one], trees[1]: [other]}, 0.5, 0.6)
    rows = [line for line in text.splitlines() if line.startswith("| eagle3_tree |")]
    assert len(rows) == 1 and rows[0].endswith(" 2.00 |") and "--tree old --tree . " in text


def test_bench_bls_replay_runs_the_served_loop_losslessly_and_writes_its_section(
    tmp_path, capsys, monkeypatch
):
    """The BLS loop the script times makes the served models' verify_draft calls: its tokens equal
    the plain loop's (the script stops otherwise), every iteration commits 1..γ+1 tokens at its
    verify step, and the section lands between its markers (tiny budget, unpadded target: this
    checks what the script writes, not the speed). With --concurrency the loops also run batched
    from threads, still lossless (the script stops otherwise), one table row per level, and the
    target's one-row forwards are a part of all its forwards."""
    import re

    mod = _benchmark("bls_replay", monkeypatch)
    out = tmp_path / "benchmarks.md"
    marks = "<!-- bench_bls_replay:start -->\nold\n<!-- bench_bls_replay:end -->"
    out.write_text(f"# Benchmarks\n\nbefore\n\n{marks}\n\nafter\n")
    recipe = Path(__file__).resolve().parents[2] / "recipes" / "tiny-draft-target.yaml"
    argv = ["--recipe", str(recipe), "--prompts", "2", "--max-tokens", "12", "--runs", "1", "--out", str(out)]
    assert mod.main([*argv, "--concurrency", "1,2"]) == 0
    text = out.read_text()
    title = "## The served draft-target BLS loop"
    assert "old" not in text and text.index("before") < text.index(title) < text.index("after")
    assert "--prompts 2 --max-tokens 12 --runs 1 --threads 1 --concurrency 1,2`" in text
    gamma = 2  # recipes/tiny-draft-target.yaml's max_draft_len
    taus = [float(x) for x in re.findall(r"\| τ per [^|]+\| (\d+\.\d+) \|", text)]
    assert len(taus) == 2 and all(1.0 <= t <= gamma + 1 for t in taus)
    speedups = re.findall(r"\| BLS loop ÷ plain loop, [^|]+\| \**(\d+\.\d+)×", text)
    assert len(speedups) == 2 and all(float(s) > 0 for s in speedups)
    rows = re.findall(
        r"^\| (\d) \| \*\*(\d+\.\d+)×\*\* \(runs: [^)]+\) \| (\d+) \| (\d+) \((\d+)%\) \|$", text, re.M
    )
    assert [r[0] for r in rows] == ["1", "2"]
    for _, speedup, forwards, single, _ in rows:
        assert float(speedup) > 0 and 0 <= int(single) <= int(forwards) and int(forwards) > 0
    assert int(rows[0][3]) == int(rows[0][2])  # at concurrency 1 every forward is one row
    capsys.readouterr()


def test_bench_forward_section(tmp_path, monkeypatch):
    """scripts/bench.py run forward times both forwards on the tiny models (a tiny budget here), checks
    their logits bitwise and writes its marked section."""
    mod = _benchmark("forward", monkeypatch)
    out = tmp_path / "benchmarks.md"
    out.write_text("# b\n\n<!-- bench_forward:start -->\nold\n<!-- bench_forward:end -->\nafter\n")
    assert mod.main(["--rounds", "1", "--steps", "2", "--context", "16", "--out", str(out)]) == 0
    text = out.read_text()
    assert "old" not in text and text.endswith("<!-- bench_forward:end -->\nafter\n")
    rows = [line for line in text.splitlines() if line.startswith(("| target |", "| draft |"))]
    assert [r.split(" | ")[:2] for r in rows] == [
        ["| target", "1"],
        ["| target", "5"],
        ["| draft", "1"],
        ["| draft", "5"],
    ]
    assert all(float(r.rstrip(" |").split(" | ")[-1].rstrip("×")) > 0 for r in rows)


@pytest.mark.slow  # a real `sdtk plan` probe (about 8 s)
def test_membound_served_plans_the_bench_run_it_sits_beside(tmp_path, monkeypatch):
    """scripts/bench_membound_served.py --plan: its `sdtk plan` (the real CLI, here on tiny-ngram
    with a tiny probe) replays as many requests as each closed loop of its A/B sends (`--requests`
    ÷ `--rounds`: here 7 requests in 2 rounds of 3 and 4, the A/B `--rounds 2`), and the
    prediction it compares is the one at the recipe's own draft length."""
    import argparse

    from toolkit.recipe import load_recipe

    monkeypatch.syspath_prepend(str(ROOT / "scripts"))  # its `from _bench import ...`
    mod = _script("bench_membound_served")
    args = argparse.Namespace(
        concurrency="1,2",
        workload="code",
        probe_prompts=2,
        requests=7,
        rounds=2,
        max_tokens=64,
        interleave=False,
        keep=tmp_path / "keep",
    )
    argv = mod._compare_argv("tiny-ngram", args, tmp_path)
    assert argv[argv.index("--requests") + 1] == "7" and argv[argv.index("--rounds") + 1] == "2"
    assert "--rounds" not in mod._compare_argv(
        "tiny-ngram", argparse.Namespace(**{**vars(args), "rounds": 1}), tmp_path
    )
    pred = mod._plan("tiny-ngram", args)
    kept = json.loads((tmp_path / "keep" / "tiny-ngram.plan.json").read_text())
    assert kept["requests"] == 3 and kept["probe"]["prompts"] == 2
    assert any("closed loop of 3 requests per level" in n for n in kept["notes"])
    own = load_recipe("tiny-ngram").speculative.draft_len
    (at_own,) = [p for p in kept["predictions"] if p["draft_len"] == own]
    assert pred == {int(c): s for c, s in at_own["speedup"].items()} and sorted(pred) == [1, 2]


def test_membound_served_yardstick_width_against_a_simulation(monkeypatch):
    """The section's "yardstick's own width" line: the chance that an exact plan lands more than
    10% from a served point which scatters as its CI says, checked against a seeded simulation of
    that scatter (written here, not with the script's formula)."""
    import numpy as np

    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    mod = _script("bench_membound_served")
    rng = np.random.default_rng(0)
    for iv, q in [
        ({"point": 2.2, "lo": 1.95, "hi": 2.45, "confidence": 0.95}, 2.25),
        ({"point": 1.2, "lo": 1.12, "hi": 1.28, "confidence": 0.95}, 1.12),
        ({"point": 1.0, "lo": 0.97, "hi": 1.03, "confidence": 0.9}, 1.0),
    ]:
        se = (iv["hi"] - iv["lo"]) / (2 * 1.959963984540054 if iv["confidence"] == 0.95 else 2 * 1.6448536)
        s = rng.normal(q, se, 400_000)
        sim = float(np.mean(np.abs(q - s) > 0.10 * s))
        assert mod._chance_miss(iv, q) == pytest.approx(sim, abs=0.003)
    # a zero-width CI: the point is the truth, so the chance is 0 or 1
    assert mod._chance_miss({"point": 1.0, "lo": 1.0, "hi": 1.0}, 1.05) == 0.0
    assert mod._chance_miss({"point": 1.0, "lo": 1.0, "hi": 1.0}, 1.2) == 1.0
    cells = [({"point": 2.0, "lo": 1.8, "hi": 2.2}, 2.05), ({"point": 1.0, "lo": 0.95, "hi": 1.05}, 1.15)]
    (line, blank) = mod._yardstick(cells)
    assert blank == "" and "of these 2 cells more than 10% from it" in line
    assert line.endswith("this run's plan misses 1.") and mod._yardstick([]) == []


def test_membound_served_keeps_the_per_request_records(tmp_path, monkeypatch):
    """--keep DIR keeps an A/B's per-request records (its report's requests.jsonl) beside its JSON;
    a plan's JSON, a failed command and a run without --keep copy nothing."""
    import argparse
    import subprocess

    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    mod = _script("bench_membound_served")
    report = tmp_path / "a report dir" / "compare-1"
    report.mkdir(parents=True)
    (report / "requests.jsonl").write_text('{"index": 0, "side": "baseline"}\n')
    (report / "compare.json").write_text("{}")
    out = json.dumps({"report_files": [str(report / "compare.json"), str(report / "requests.jsonl")]})
    keep = tmp_path / "keep"
    args = argparse.Namespace(keep=keep)
    mod._keep(args, "r.plan.json", subprocess.CompletedProcess([], 0, out, ""))
    assert sorted(p.name for p in keep.iterdir()) == ["r.plan.json"]
    # an A/B, as `_compare` keeps it: its JSON, then (once it parsed) its records
    mod._keep(args, "r.2.compare.json", subprocess.CompletedProcess([], 0, out, ""))
    mod._keep_records(args, "r.2.requests.jsonl", json.loads(out))
    assert (keep / "r.2.requests.jsonl").read_text() == '{"index": 0, "side": "baseline"}\n'
    mod._keep(args, "s.compare.json", subprocess.CompletedProcess([], 1, out, ""))  # `_json` exits next
    none = argparse.Namespace(keep=None)
    mod._keep(none, "t.compare.json", subprocess.CompletedProcess([], 0, out, ""))
    mod._keep_records(none, "t.requests.jsonl", json.loads(out))
    assert sorted(p.name for p in keep.iterdir()) == ["r.2.compare.json", "r.2.requests.jsonl", "r.plan.json"]


@pytest.mark.slow  # SmolLM2-135M (converted once per session by tests/conftest.py) on 2 cores
def test_bench_smollm2_hf_section(smollm2_cache, monkeypatch, tmp_path):
    """scripts/bench_smollm2_hf.py at a tiny budget: its section replaces the old one between its
    markers, every contender's greedy output equals HF plain `generate`'s (the script checks it
    token for token), and without a draft (`--no-draft`; the shipped one is the default) the
    draft-target ratio is said not measured."""
    from toolkit.hub import gguf

    monkeypatch.setenv(gguf.CACHE_ENV, str(smollm2_cache))
    mod = _script("bench_smollm2_hf")
    out = tmp_path / "benchmarks.md"
    out.write_text("# b\n\n<!-- bench_smollm2_hf:start -->\nold\n<!-- bench_smollm2_hf:end -->\nafter\n")
    assert mod.main(["--prompts", "1", "--new-tokens", "6", "--runs", "1", "--no-draft", "--out", str(out)]) == 0
    text = out.read_text()
    # The harness puts its one run line first, then the section.
    assert re.match(r"# b\n\n<!-- bench_smollm2_hf:start -->\n_Run: .*_\n\n## SmolLM2-135M-Instruct", text), text[:300]
    assert text.endswith("<!-- bench_smollm2_hf:end -->\nafter\n") and "old" not in text
    assert "dequantized from Q4_1, not the original bf16 weights" in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| method")]
    names = [row.split(" | ")[0].lstrip("| ") for row in rows]
    assert names == [
        "HF generate: target only",
        "reference: target only",
        "reference: n-gram (γ = 3, n-gram ≤ 3)",
        "HF prompt lookup (γ = 3, n-gram ≤ 3)",
    ]
    assert all(row.endswith("| 1/1 |") for row in rows), rows
    assert "- reference n-gram ÷ HF prompt lookup: **" in text
    assert "- reference draft-target ÷ HF assisted generation: not measured in this run" in text


def test_demo_script_parses_and_its_prompts_load():
    """scripts/demo.sh is valid bash, and its prompt file (what its A/B sends; its first three are
    the streamed generations) loads as a bench workload, each request bounded at 48 tokens."""
    import subprocess

    from toolkit.bench.measure.workloads import load_workload

    subprocess.run(["bash", "-n", str(ROOT / "scripts" / "demo.sh")], check=True)
    wl = load_workload(prompts_file=ROOT / "scripts" / "demo_prompts.jsonl")
    assert len(wl.prompts) == 6 and all(p.max_tokens == 48 for p in wl.prompts)
    assert wl.prompts[0].text.startswith("Summarize in one sentence: The Eiffel Tower")
    assert "scripts/demo_prompts.jsonl" in (ROOT / "scripts" / "demo.sh").read_text()
