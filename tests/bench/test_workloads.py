"""Bundled prompt sets, user prompt files (with line-numbered errors) and the synthetic mode."""

from __future__ import annotations

import json

import pytest

from toolkit.bench.errors import WorkloadError
from toolkit.bench.measure.workloads import (
    CATEGORIES,
    SYNTHETIC_WARNING,
    bundled_path,
    load_workload,
    read_prompt_file,
)


@pytest.mark.parametrize("name", CATEGORIES)
def test_bundled_sets(name):
    path = bundled_path(name)
    head = path.read_text(encoding="utf-8").splitlines()[0]
    assert "written for sdtk" in head and "CC0" in head
    wl = load_workload(name)
    assert len(wl.prompts) >= 30
    assert {p.category for p in wl.prompts} == {name}
    assert all(p.max_tokens > 0 and p.text.strip() for p in wl.prompts)
    assert len({p.text for p in wl.prompts}) == len(wl.prompts)
    assert not wl.synthetic and not wl.warnings


def test_code_set_is_python():
    texts = [p.text for p in load_workload("code").prompts]
    assert sum(t.lstrip().startswith(("def ", "class ", "import ")) for t in texts) == len(texts)


def test_mixed_interleaves_categories_and_max_tokens_override():
    wl = load_workload("mixed", max_tokens=17)
    assert [p.category for p in wl.prompts[:4]] == list(CATEGORIES)
    assert {p.max_tokens for p in wl.prompts} == {17}
    assert len(wl.prompts) == sum(len(load_workload(c).prompts) for c in CATEGORIES)


def test_sample_is_seeded_and_cycles():
    wl = load_workload("math")
    a, b = wl.sample(100, seed=5), wl.sample(100, seed=5)
    assert a == b and len(a) == 100
    assert wl.sample(100, seed=6) != a
    assert {p.text for p in a[: len(wl.prompts)]} == {p.text for p in wl.prompts}  # a full pass first
    assert wl.sample(0, seed=1) == []


def test_synthetic_is_labelled():
    wl = load_workload("synthetic", max_tokens=8)
    assert wl.synthetic and SYNTHETIC_WARNING in wl.warnings
    assert wl.to_dict()["warnings"] == [SYNTHETIC_WARNING]
    assert {p.category for p in wl.prompts} == {"synthetic"} and {p.max_tokens for p in wl.prompts} == {8}
    assert load_workload("synthetic").prompts == load_workload("synthetic").prompts


def test_user_file(tmp_path):
    f = tmp_path / "mine.jsonl"
    f.write_text(
        '# my prompts\n\n{"prompt": "def add(a, b):", "max_tokens": 12, "id": 7}\n{"prompt": "hello"}\n'
    )
    wl = load_workload(prompts_file=f)
    assert wl.name == "file:mine.jsonl" and len(wl.prompts) == 2
    assert wl.prompts[0].max_tokens == 12 and wl.prompts[0].source_line == 3
    assert wl.prompts[1].max_tokens == 128 and wl.prompts[1].category == "mine"
    assert load_workload(str(f)).prompts == wl.prompts  # a path given as the workload name


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "the prompt file is empty"),
        ("# only a comment\n\n", "has no prompts"),
        ('{"prompt": "ok"}\n{"prompt": "x",}\n', "line 2: not valid JSON"),
        ('{"prompt": "ok"}\n["a list"]\n', "line 2: expected a JSON object, got list"),
        ('{"text": "hi"}\n', "line 1: missing field 'prompt' (fields present: text)"),
        ('{"promt": "hi"}\n', "did you mean to rename 'promt'"),
        ('{"prompt": "  "}\n', "line 1: 'prompt' must be a non-empty string"),
        ('{"prompt": 3}\n', "line 1: 'prompt' must be a non-empty string"),
        ('{"prompt": "a", "max_tokens": 0}\n', "line 1: 'max_tokens' must be a positive integer, got 0"),
        ('{"prompt": "a", "max_tokens": "9"}\n', "line 1: 'max_tokens' must be a positive integer, got '9'"),
        ('{"prompt": "a", "category": ""}\n', "line 1: 'category' must be a non-empty string"),
    ],
)
def test_bad_user_files(tmp_path, text, message):
    f = tmp_path / "p.jsonl"
    f.write_text(text)
    with pytest.raises(WorkloadError) as e:
        read_prompt_file(f)
    assert message in str(e.value)
    assert str(f) in str(e.value)


def test_missing_and_binary_files(tmp_path):
    with pytest.raises(WorkloadError, match="no such prompt file"):
        load_workload(prompts_file=tmp_path / "nope.jsonl")
    b = tmp_path / "b.jsonl"
    b.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(WorkloadError, match="not UTF-8"):
        read_prompt_file(b)
    with pytest.raises(WorkloadError, match="cannot read"):
        read_prompt_file(tmp_path)


def test_unknown_workload_and_conflicts(tmp_path):
    with pytest.raises(WorkloadError, match="did you mean 'math'"):
        load_workload("maths")
    f = tmp_path / "p.jsonl"
    f.write_text(json.dumps({"prompt": "x"}) + "\n")
    with pytest.raises(WorkloadError, match="not both"):
        load_workload("code", prompts_file=f)
    with pytest.raises(WorkloadError, match="positive integer"):
        load_workload("code", max_tokens=0)
