"""`sdtk train-draft --dry-run` for recipes/llama-3.1-8b-eagle3.yaml, offline: no weights, the
target's config facts from sdtk's catalogue (a copy of the hub config.json)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from toolkit.cli import cli
from toolkit.train.launch import eagle3_head_params

ROOT = Path(__file__).resolve().parents[1].parent
RECIPE = "recipes/llama-3.1-8b-eagle3.yaml"


def _dry(*extra: str) -> dict:
    r = CliRunner().invoke(
        cli,
        [
            "train-draft",
            RECIPE,
            "--data",
            "chat",
            "--out",
            "/data/eagle3-chat",
            "--dry-run",
            "--json",
            *extra,
        ],
        catch_exceptions=False,
    )
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_dry_run_prints_the_torchrun_argv(monkeypatch):
    monkeypatch.chdir(ROOT)
    d = _dry("--gpus", "8", "--batch-size", "1", "--seq-len", "2048", "--max-steps", "5000")
    assert d["argv"] == [
        "torchrun", "--standalone", "--nnodes", "1", "--nproc-per-node", "8", "-m", "toolkit.cli",
        "train-draft", RECIPE, "--data", "chat", "--out", "/data/eagle3-chat",
        "--max-steps", "5000", "--batch-size", "1", "--seq-len", "2048",
    ]  # fmt: skip
    assert d["command"].startswith("torchrun --standalone --nnodes 1 --nproc-per-node 8 -m toolkit.cli ")


def test_dry_run_memory_estimate_from_config_facts(monkeypatch):
    monkeypatch.chdir(ROOT)
    d = _dry("--gpus", "4", "--batch-size", "1", "--seq-len", "2048")
    mem, facts = d["memory_gib_per_gpu"], d["facts"]
    # Llama-3.1-8B: 8,030,261,248 parameters (the hub's safetensors index), bf16
    assert facts["target"]["parameters"] == 8_030_261_248
    assert mem["target weights"] == round(8_030_261_248 * 2 / 1024**3, 2)
    # the head: yardstick = the published EAGLE3-LLaMA3.1-Instruct-8B shapes (SafeAILab/EAGLE @cb7e084
    # eagle/traineagle3/config.json and cnets.py; ModelOpt's EAGLE_MODELOPT_TO_OFFICIAL):
    # fc [4096, 12288], q/k/v read 8192, mlp 14336, lm_head [32000, 4096]
    h = 4096
    published = 4096 * 12288 + 8192 * 4096 + 2 * 8192 * 1024 + 4096 * 4096 + 3 * h * 14336 + 4 * h + 32000 * h
    assert facts["head_params"] == published == eagle3_head_params(4096, 14336, 32, 8, 128, 32000)
    assert mem["head+optimizer"] == round(published * 16 / 1024**3, 2)
    assert 0 < mem["activations"] < mem["target weights"]
    assert abs(mem["total"] - (mem["target weights"] + mem["head+optimizer"] + mem["activations"])) < 0.02
    # steps per epoch = ceil(tokens / (batch × seq × GPUs))
    assert d["steps_per_epoch"] == -(-d["tokens_per_epoch"] // (1 * 2048 * 4))


def test_dry_run_with_a_given_config_json(monkeypatch):
    """--config: a target the catalogue does not know (here the tiny target's config.json, whose
    parameter count models/tiny/README.md states: 5,770,496)."""
    monkeypatch.chdir(ROOT)
    d = _dry("--gpus", "2", "--config", "models/tiny/target/config.json")
    assert d["facts"]["target"]["parameters"] == 5_770_496
    # the shipped tiny head (draft vocab 1024 = 2048 // 2) has 1,377,280 parameters (models/tiny/README.md)
    assert d["facts"]["head_params"] == 1_377_280
    assert d["argv"][:6] == ["torchrun", "--standalone", "--nnodes", "1", "--nproc-per-node", "2"]
