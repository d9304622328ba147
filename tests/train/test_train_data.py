"""toolkit.train.data: the hold-out split and the self-distillation cache key."""

from __future__ import annotations

import pytest

from toolkit.errors import UsageError
from toolkit.train.data import TrainPrompt, cache_key, load_prompts, split


def _prompts(n: int) -> list[TrainPrompt]:
    return [TrainPrompt(f"prompt number {i}", "x", 32) for i in range(n)]


def test_split_is_disjoint_order_free_and_sized():
    ps = _prompts(20)
    train, held = split(ps, 0.25, seed=0)
    assert len(held) == 5 and len(train) == 15
    assert not {p.text for p in train} & {p.text for p in held}
    train_r, held_r = split(list(reversed(ps)), 0.25, seed=0)  # the file's order does not matter
    assert {p.text for p in held_r} == {p.text for p in held}
    assert {p.text for p in split(ps, 0.25, seed=1)[1]} != {p.text for p in held}  # the seed does


def test_split_keeps_one_on_each_side_and_rejects_bad_input():
    train, held = split(_prompts(2), 0.9, seed=0)
    assert len(train) == 1 and len(held) == 1
    with pytest.raises(UsageError, match="at least 2 distinct"):
        split([TrainPrompt("same", "x", 8)] * 3, 0.5, seed=0)
    with pytest.raises(UsageError, match="between 0 and 1"):
        split(_prompts(4), 1.0, seed=0)


def test_cache_key_changes_with_every_input():
    ps = _prompts(3)
    k = cache_key("fp", ps, 64, "ref")
    assert k == cache_key("fp", list(ps), 64, "ref")
    assert len({k, cache_key("fp2", ps, 64, "ref"), cache_key("fp", ps[:2], 64, "ref"),
                cache_key("fp", ps, 32, "ref"), cache_key("fp", ps, 64, "endpoint:x")}) == 5  # fmt: skip


def test_bundled_workload_loads():
    name, ps = load_prompts("summarization")
    assert name == "summarization" and len(ps) > 20 and all(p.text for p in ps)


def _save_dataset(path, columns: dict, *, splits: tuple[str, ...] = ()) -> None:
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict(columns)
    if splits:
        ds = datasets.DatasetDict({s: ds for s in splits})
    ds.save_to_disk(str(path))


def test_hf_dataset_dir_with_a_prompt_column_trains(tmp_path):
    """`--data DIR` (a `datasets` save_to_disk directory, its path with a space): the prompts it
    holds are split, self-distilled and trained on, a couple of steps of the tiny draft."""
    import json
    from pathlib import Path

    from click.testing import CliRunner

    from toolkit.cli import cli

    prompts = ["def read_config(path):", "class LRUCache:", "for i in range(10):", "import os\n", ""]
    data = tmp_path / "my workload"
    _save_dataset(data, {"prompt": prompts, "id": list(range(len(prompts)))})
    out = tmp_path / "td"
    recipe = str(Path(__file__).resolve().parents[2] / "recipes" / "tiny-draft-target.yaml")
    args = ["train-draft", recipe, "--data", str(data), "--out", str(out), "--holdout", "0.25",
            "--batch-size", "2", "--seq-len", "24", "--gen-tokens", "6", "--eval-tokens", "4",
            "--max-steps", "2", "--threads", "1", "--json"]  # fmt: skip
    r = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert r.exit_code == 0, r.output[-3000:]
    rep = json.loads(r.stdout)
    assert rep["data"]["workload"] == "dataset:my workload" and rep["data"]["prompts"] == 4  # "" dropped
    assert rep["training"]["steps"] == 2
    read = [json.loads(x)["prompt"] for x in (out / "data" / "train.jsonl").read_text().splitlines()]
    read += [json.loads(x)["prompt"] for x in (out / "data" / "holdout.jsonl").read_text().splitlines()]
    assert sorted(read) == sorted(p for p in prompts if p)
    assert rep["data"]["self_distillation"]["prompts"] == len(read) - rep["data"]["holdout_prompts"]


def test_hf_dataset_dict_with_messages_reads_the_train_split(tmp_path):
    chats = [
        [{"role": "system", "content": "be brief"}, {"role": "user", "content": f"question {i}"},
         {"role": "assistant", "content": "answer"}]
        for i in range(3)
    ]  # fmt: skip
    _save_dataset(tmp_path / "chats", {"messages": chats}, splits=("test", "train"))
    name, ps = load_prompts(tmp_path / "chats")
    assert name == "dataset:chats" and [p.text for p in ps] == ["question 0", "question 1", "question 2"]
    # ShareGPT's `conversations` (from/value) and a plain `text` column too
    sharegpt = [[{"from": "human", "value": "hi there"}, {"from": "gpt", "value": "hello"}]]
    _save_dataset(tmp_path / "sg", {"conversations": sharegpt})
    assert [p.text for p in load_prompts(tmp_path / "sg")[1]] == ["hi there"]
    _save_dataset(tmp_path / "txt", {"text": ["a text", "another"]})
    assert [p.text for p in load_prompts(tmp_path / "txt")[1]] == ["a text", "another"]


def test_hf_dataset_without_a_prompt_column_names_the_columns_it_found(tmp_path):
    _save_dataset(tmp_path / "qa", {"question": ["q"], "answer": ["a"]})
    with pytest.raises(UsageError, match=r"`conversations` column \(columns: answer, question\)") as e:
        load_prompts(tmp_path / "qa")
    assert "rename_column" in (e.value.hint or "")
    (tmp_path / "not a dataset").mkdir()
    with pytest.raises(UsageError, match="not a Hugging Face dataset"):
        load_prompts(tmp_path / "not a dataset")
    _save_dataset(tmp_path / "empty", {"prompt": ["", " "]})
    with pytest.raises(UsageError, match="no non-empty prompts"):
        load_prompts(tmp_path / "empty")
