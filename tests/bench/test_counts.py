"""Exact token counts: the server's, else the tokenizer's over the cumulative text, else a refusal
(or, with allow_inexact, estimates marked INEXACT in every output). Also the shared --workdir
resolver, deployed_recipe and the progress bars.

The endpoints here are in-process stand-ins for a server (the live counterparts are
test_live.py, test_yardstick.py and test_cli_live.py); the tokenizer is the real tiny one.
"""

from __future__ import annotations

import asyncio
import csv
import json
import time
from pathlib import Path

import pytest

from toolkit.bench.decide.compare import compare_levels, verdict
from toolkit.bench.errors import BenchAborted, InexactCounts
from toolkit.bench.measure.loadgen import Chunk, cumulative_counts, run_load
from toolkit.bench.measure.tokens import TokenCounter, TokenizerUnavailable, recipe_tokenizer
from toolkit.bench.measure.workloads import load_workload
from toolkit.bench.report import render, write_bench_reports, write_compare_reports
from toolkit.bench.results import ABResult
from toolkit.bench.targets import deployed_recipe, resolve_side
from toolkit.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]
TARGET = ROOT / "models" / "tiny" / "target"
WORDS = ["def", " fib", "(n", "):\n", "    return", " n", " if", " n", " <", " 2"]


class CountlessEndpoint:
    """A model without `return_num_output_tokens` (like the llmapi model): text only, 2 words a chunk.

    `declares=True` stands for a model that has the input but whose responses lack the count."""

    def __init__(self, declares: bool = False):
        self.name = "fake://countless"
        self.inputs = {"text_input", "max_tokens", "stream"} | (
            {"return_num_output_tokens"} if declares else set()
        )

    async def check(self) -> None:
        return None

    async def alive(self) -> bool:
        return True

    async def stream(self, prompt, *, seed, sampling):
        for i in range(0, len(WORDS), 2):
            await asyncio.sleep(0.001)
            yield Chunk(time=time.monotonic(), text="".join(WORDS[i : i + 2]))

    async def close(self) -> None:
        return None


def run(ep, **kw):
    kw.setdefault("progress", False)
    kw.setdefault("warmup", 1)
    return asyncio.run(run_load(ep, load_workload("code"), concurrency=[1], requests=3, **kw))


def test_no_counts_and_no_tokenizer_is_refused_before_any_request():
    with pytest.raises(InexactCounts, match="no tokenizer is known") as e:
        run(CountlessEndpoint())
    assert "--tokenizer" in e.value.hint and "--allow-inexact" in e.value.hint


def test_declared_but_missing_counts_stop_the_run():
    with pytest.raises(InexactCounts, match="without num_output_tokens"):
        run(CountlessEndpoint(declares=True))  # caught in the warm-up
    with pytest.raises(BenchAborted, match="without num_output_tokens") as e:
        run(CountlessEndpoint(declares=True), warmup=0)
    assert "--allow-inexact" in e.value.hint


def test_allow_inexact_marks_every_output(tmp_path):
    r = run(CountlessEndpoint(), allow_inexact=True)
    s = r.levels[0].summary()
    assert not r.token_counts_exact and s["token_count_source"] == "estimate"
    assert r.levels[0].records[0].chunk_tokens == [1] * 5
    d = r.to_dict(records=True)
    assert d["token_counts_exact"] is False and d["settings"]["allow_inexact"] is True
    assert any("INEXACT" in w for w in d["warnings"])
    assert "INEXACT token counts" in render(r)
    write_bench_reports(r, tmp_path)
    rows = list(csv.DictReader((tmp_path / "bench.csv").open()))
    assert rows[0]["token counts"] == "INEXACT"
    assert json.loads((tmp_path / "bench.json").read_text())["token_counts_exact"] is False
    rec = json.loads((tmp_path / "requests.jsonl").read_text().splitlines()[0])
    assert rec["token_count_source"] == "estimate" and "chunk_texts" not in rec
    # A comparison with one inexact side says so in its verdict, table and plot titles.
    ab = ABResult("b", "s", r.workload, {"requests": 3, "seed": 0}, baseline=r, speculative=r)
    ab.levels = compare_levels(r, r, resamples=50)
    ab.verdict = verdict(ab.levels)[0]
    assert not ab.token_counts_exact and "INEXACT" in render(ab)
    files = write_compare_reports(ab, tmp_path / "ab")
    assert any(p.suffix == ".png" for p in files)
    assert json.loads((tmp_path / "ab" / "compare.json").read_text())["token_counts_exact"] is False


@pytest.mark.skipif(not (TARGET / "tokenizer.json").is_file(), reason="tiny target tokenizer missing")
def test_tokenizer_counts_the_cumulative_text():
    count = TokenCounter(TARGET)
    r = run(CountlessEndpoint(), count_tokens=count, tokenizer=str(TARGET))
    s = r.levels[0].summary()
    assert r.token_counts_exact and s["token_count_source"] == "tokenizer"
    text = "".join(WORDS)
    for rec in r.levels[0].records:
        assert rec.output_tokens == count(text) and rec.chunk_texts is None
    assert r.settings["tokenizer"] == str(TARGET)
    # Any split of a text into chunks gives the count of the whole text, never a negative chunk.
    long = 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n    if n < 2:\n        return n\n'
    for step in (1, 2, 3, 7):
        parts = [long[i : i + step] for i in range(0, len(long), step)]
        counts = cumulative_counts(parts, count)
        assert sum(counts) == count(long) and min(counts) >= 0


def test_tokenizer_errors_and_recipe_tokenizer(tmp_path):
    with pytest.raises(TokenizerUnavailable, match="cannot load the tokenizer"):
        TokenCounter(tmp_path / "nothing")("some text")
    # A tokenizer that will have to count every request is loaded before the first one.
    ep = CountlessEndpoint()
    with pytest.raises(TokenizerUnavailable):
        run(ep, count_tokens=TokenCounter(tmp_path / "nothing"))
    from toolkit.recipe import load_recipe

    assert recipe_tokenizer(load_recipe("tiny-eagle3")) == str(TARGET)
    assert recipe_tokenizer(None) is None


def _state(d: Path) -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / "state.json").write_text(
        json.dumps(
            {
                "pid": 999999,
                "pgid": 999999,
                "start_ticks": 1,
                "started_at": 0,
                "http_url": "http://127.0.0.1:1",
                "grpc_url": "127.0.0.1:2",
                "metrics_url": "",
                "model_name": "ensemble",
                "model_repo": "",
                "argv": [],
                "log_path": "",
                "workdir": str(d),
            }
        )
    )


def test_one_workdir_resolver(tmp_path):
    from toolkit.deploy import find_deployment
    from toolkit.deploy.result import save_recipe as _save_recipe
    from toolkit.recipe import load_recipe
    from toolkit.server.state import find_deployment as resolve

    dep = tmp_path / "tiny-draft-target"
    _state(dep)
    _save_recipe(load_recipe("tiny-draft-target"), dep)
    for given in (tmp_path, dep):
        assert resolve(given) == dep == find_deployment(given)
    # deployed_recipe: from the deploy workdir or the deployment directory; γ and tokenizer follow.
    for given in (tmp_path, dep):
        rec = deployed_recipe(given)
        assert rec.display_name == "tiny-draft-target"
        assert rec.speculative.max_draft_len == load_recipe("tiny-draft-target").speculative.max_draft_len
    empty = tmp_path / "empty"
    empty.mkdir()
    assert deployed_recipe(empty) is None  # no recipe.json there: nothing known, not an error
    # bench's side resolution goes through the same resolver (the server here is not running).
    with pytest.raises(Exception, match="not running"):
        resolve_side(tmp_path, label="target")
    _state(tmp_path / "other")
    with pytest.raises(UsageError, match="several deployments"):
        resolve(tmp_path)
    with pytest.raises(UsageError, match="no deployment found"):
        resolve(None, default=tmp_path / "missing")


def test_progress_bar_has_an_eta_per_level(capsys):
    from toolkit.progress import Bars

    bar = Bars(True, "bench")
    names = [type(c).__name__ for c in bar.bar.columns]
    assert "TimeRemainingColumn" in names and "MofNCompleteColumn" in names
    r = run(CountlessEndpoint(), allow_inexact=True, progress=True)
    assert r.levels
    err = capsys.readouterr().err
    assert "bench c=1" in err and "warm-up" in err and "ETA" in err


def test_cli_progress_off_under_json_without_a_tty(monkeypatch):
    import io

    from toolkit.progress import enabled as _progress

    monkeypatch.setattr("sys.stderr", io.StringIO())
    assert _progress(as_json=True) is False and _progress(as_json=False) is True

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr("sys.stderr", Tty())
    assert _progress(as_json=True) is True
