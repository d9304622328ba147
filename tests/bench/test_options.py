"""RunOptions: the one place bench, compare, tune and plan load their workload and pick their
report directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolkit.bench.measure.workloads import load_workload, workload_for
from toolkit.bench.options import RunOptions
from toolkit.errors import UsageError


def test_workload_for_loads_names_files_and_loaded_workloads(tmp_path):
    named = workload_for(RunOptions(workload="code", max_tokens=7, seed=3))
    assert named.name == "code" and {p.max_tokens for p in named.prompts} == {7}
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "a b c", "max_tokens": 5}\n{"prompt": "d e"}\n')
    from_file = workload_for(RunOptions(workload="code", prompts_file=f))  # the file wins over the name
    assert from_file.name == "file:p.jsonl" and [p.text for p in from_file.prompts] == ["a b c", "d e"]
    loaded = load_workload("math", seed=0)
    assert workload_for(RunOptions(workload=loaded)) is loaded
    capped = workload_for(RunOptions(workload=loaded, max_tokens=4))
    assert {p.max_tokens for p in capped.prompts} == {4} and [p.text for p in capped.prompts] == [
        p.text for p in loaded.prompts
    ]


def test_out_dir_and_protocol():
    assert RunOptions(report_dir="r").out_dir("bench", "dep") == Path("r")
    d = RunOptions(workdir="w").out_dir("tune", "dep")
    assert d.parent == Path("w/reports") and d.name.startswith("tune-")
    assert RunOptions().out_dir("bench", "dep").parent == Path("dep/reports")
    assert RunOptions().out_dir("compare").parent == Path("workdir/reports")
    with pytest.raises(UsageError, match="grpc or http"):
        RunOptions(protocol="udp")
