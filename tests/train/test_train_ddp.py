"""Data parallel training under `torchrun` (issue 25: multi-GPU by torchrun and DDP), run on CPU with
torch.distributed's gloo backend: a stand-in for the multi-GPU launch (the same code path, NCCL and
CUDA placement aside, which need GPUs).

Two ranks of 2 sequences each must train exactly what one process trains with the global batch of 4:
each rank takes its slice of the same global batch and DistributedDataParallel averages the
gradients, so the exported EAGLE-3 heads agree to float rounding."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
RECIPE = str(ROOT / "recipes" / "tiny-eagle3.yaml")
PROMPTS = ["def read_config(path):", "class LRUCache:", "for i in range(10):", "import os\n", "x = [", "def f(x):"]


def _train(out: Path, prompts: Path, procs: int, batch: int) -> dict:
    args = ["train-draft", RECIPE, "--data", str(prompts), "--out", str(out), "--holdout", "0.34",
            "--batch-size", str(batch), "--seq-len", "32", "--gen-tokens", "8", "--eval-tokens", "4",
            "--max-steps", "3", "--checkpoint-every", "3", "--threads", "1", "--json"]  # fmt: skip
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
                "--nproc-per-node", str(procs)] if procs > 1 else [sys.executable]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    r = subprocess.run([*launcher, "-m", "toolkit.cli", *args], capture_output=True, text=True, timeout=600,
                       stdin=subprocess.DEVNULL, cwd=ROOT, env=env)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads((out / "train_report.json").read_text())


def test_two_ranks_train_what_one_process_trains_with_their_global_batch(tmp_path):
    import torch
    from safetensors.torch import load_file

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p, "max_tokens": 8}) + "\n" for p in PROMPTS))
    one = _train(tmp_path / "one", prompts, procs=1, batch=4)
    two = _train(tmp_path / "two", prompts, procs=2, batch=2)
    assert one["training"]["gpus_or_processes"] == 1 and two["training"]["gpus_or_processes"] == 2
    assert two["training"]["steps"] == 3
    a = load_file(str(tmp_path / "one" / "eagle3" / "model.safetensors"))
    b = load_file(str(tmp_path / "two" / "eagle3" / "model.safetensors"))
    shipped = load_file(str(ROOT / "models" / "tiny" / "eagle3" / "model.safetensors"))
    assert a.keys() == b.keys()
    for k in a:
        if a[k].is_floating_point():
            moved = (a[k].float() - shipped[k].float()).abs().max() if k in shipped else None
            diff = (a[k].float() - b[k].float()).abs().max()
            assert diff <= 2e-3, (k, float(diff), None if moved is None else float(moved))
        else:
            assert torch.equal(a[k], b[k]), k
