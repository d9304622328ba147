"""scripts/bench.py, the one runner of sdtk's benchmarks: its registry against the docs' markers,
every benchmark's `--quick` command line (parsed only: nothing heavy runs here), the one section
writer and its header, and one real `--quick` run that must leave the docs alone."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"<!-- ([a-z0-9_]+):(start|end) -->")


@pytest.fixture()
def runner(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    spec = importlib.util.spec_from_file_location("bench_runner", ROOT / "scripts" / "bench.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _registry():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        return importlib.import_module("benchmarks").BENCHMARKS
    finally:
        sys.path.remove(str(ROOT / "scripts"))


@pytest.mark.parametrize("bench", _registry(), ids=lambda b: b.name)
def test_quick_parses_and_names_an_existing_section(bench, runner):
    """`run NAME --quick`'s command line parses with the benchmark's own parser (stopped right
    after parsing), and the section it writes has both markers in its docs page."""
    from benchmarks import _harness

    text = (ROOT / bench.doc).read_text(encoding="utf-8")
    start, end = f"<!-- {bench.marker}:start -->", f"<!-- {bench.marker}:end -->"
    assert text.count(start) == 1 and text.count(end) == 1 and text.index(start) < text.index(end)
    ns = _harness.parse_only(runner.entry(bench), runner.argv_for(bench, True, []))
    assert vars(ns) and "?" in bench.question
    with pytest.raises(SystemExit):  # ... and the parser is the benchmark's, not a catch-all
        _harness.parse_only(runner.entry(bench), runner.argv_for(bench, True, ["--no-such-option"]))


def test_every_docs_section_has_its_benchmark():
    """No marked section of the results page or the lab notebook is left without the benchmark
    that rewrites it, and no two benchmarks write one section."""
    benches = _registry()
    owned = [(b.doc, b.marker) for b in benches]
    assert len(owned) == len(set(owned)) and len({b.name for b in benches}) == len(benches)
    for doc in ("docs/benchmarks.md", "docs/lab/benchmarks-history.md"):
        found = {m for m, _ in MARKER.findall((ROOT / doc).read_text(encoding="utf-8"))}
        assert found == {m for d, m in owned if d == doc}, doc


def test_list_names_every_benchmark_its_question_and_section(runner, capsys):
    assert runner.main(["list"]) == 0
    out = capsys.readouterr().out
    for b in _registry():
        assert re.search(rf"^{b.name} +{re.escape(b.question)}$", out, re.M)
        assert f"-> {b.doc} <!-- {b.marker} -->" in out


def test_write_section_heads_it_with_the_run_and_honours_quick(runner, tmp_path):
    """The one writer: the section lands between its markers with the run's command, date and
    machine on its first line; a run that may not write (--quick) leaves the file as it was."""
    from benchmarks import _harness

    doc = tmp_path / "b.md"
    doc.write_text("# B\n\n<!-- x:start -->\nold\n<!-- x:end -->\nafter\n")
    start, end = "<!-- x:start -->", "<!-- x:end -->"
    try:
        _harness.start_run("python scripts/bench.py run x --rounds 2", write=True)
        assert _harness.write_section(doc, start, end, f"{start}\n## X\n\n| a |\n{end}")
        lines = doc.read_text().splitlines()
        assert lines[:3] == ["# B", "", start] and lines[-2:] == [end, "after"]
        assert re.fullmatch(
            r"_Run: `python scripts/bench.py run x --rounds 2` · \d{4}-\d\d-\d\d \d\d:\d\d UTC · .+, \d+ cores\._",
            lines[3],
        )
        assert lines[4:-2] == ["", "## X", "", "| a |"]
        before = doc.read_text()
        _harness.start_run("python scripts/bench.py run x --quick", write=False)
        assert not _harness.write_section(doc, start, end, "## Y")
        assert doc.read_text() == before
    finally:
        _harness.start_run("", write=True)


def test_quick_run_measures_and_leaves_the_docs_alone():
    """A real `run twin_step --quick` (the cheapest benchmark: one small model's forwards) prints
    its section and writes nowhere."""
    doc = ROOT / "docs" / "lab" / "benchmarks-history.md"
    before = doc.read_bytes()
    r = subprocess.run(
        [sys.executable, "scripts/bench.py", "run", "twin_step", "--quick", "--reps", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "<!-- bench_twin_step:start -->" in r.stdout and "| twin (MatrixLinear) |" in r.stdout
    assert "(not written: <!-- bench_twin_step:start -->" in r.stderr
    assert doc.read_bytes() == before
