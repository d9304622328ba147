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
    with pytest.raises(UsageError, match="protocol must be one of grpc, http, openai"):
        RunOptions(protocol="udp")


def test_run_options_are_declared_once():
    """The commands take one RunOptions (or its fields as keywords): none of them re-declares a
    field as a parameter of its own, so a default lives in RunOptions only."""
    import dataclasses
    import inspect

    from toolkit.bench import api

    fields = {f.name for f in dataclasses.fields(RunOptions)}
    for fn in (api.bench, api.compare, api.plan, api.tune):
        params = inspect.signature(fn).parameters
        assert not fields & set(params), (fn.__name__, fields & set(params))
        assert "opts" in params and params["changes"].kind is inspect.Parameter.VAR_KEYWORD


def test_run_option_keywords_merge_and_typos_are_named():
    base = RunOptions(requests=16, protocol="http")
    assert RunOptions.of(base, warmup=0) == RunOptions(requests=16, protocol="http", warmup=0)
    assert RunOptions.of(None, seed=3).requests == RunOptions().requests
    with pytest.raises(UsageError, match="unknown run option 'request'; did you mean 'requests'"):
        RunOptions.of(base, request=8)
    with pytest.raises(UsageError, match="protocol must be one of grpc, http, openai"):
        RunOptions.of(base, protocol="udp")
