#!/usr/bin/env python
"""GPU check of `sdtk train-draft`'s trainers (run on a machine with CUDA, e.g. the device tool):
each trainable mode trains on CUDA (bf16 target, fp32 head or draft), its checkpoints hold the
trainable tensors only, and a run stopped at step STEPS/2 and resumed to STEPS equals one that
ran STEPS straight (losses and parameters).

    python scripts/gpu_check_train.py OUT [STEPS=4] [MODES=eagle3,medusa,draft_target]

Also worth running there: `torchrun --standalone --nnodes 1 --nproc-per-node 1 -m toolkit.cli
train-draft recipes/tiny-eagle3.yaml --data code --out DIR --max-steps 30` (NCCL), then again with
a larger --max-steps and --resume. Results of the last run: docs/lab/benchmarks-history.md,
"`sdtk train-draft` on a GPU".
"""

import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch

from toolkit.modes import DRAFT_TARGET, EAGLE3, MEDUSA
from toolkit.train import trainers
from toolkit.train.data import Example
from toolkit.train.loop import latest_checkpoint, load_trainable

ROOT = Path(".").resolve()
TARGET = ROOT / "models/tiny/target"
OUT = Path(sys.argv[1])
STEPS = int(sys.argv[2]) if len(sys.argv) > 2 else 4
print("cuda", torch.cuda.is_available(), torch.__version__, flush=True)
from transformers import AutoTokenizer  # noqa: E402

tok = AutoTokenizer.from_pretrained(str(TARGET))
texts = [
    "def read_config(path):\n    with open(path) as f:\n        return json.load(f)\n",
    "class LRUCache:\n    def __init__(self, n):\n        self.n = n\n        self.d = {}\n",
    "for i in range(10):\n    print(i * i)\n",
    "import os\nimport sys\n\ndef main():\n    print(os.getcwd(), sys.argv)\n",
] * 3
exs = [Example(t, [int(i) for i in tok(t)["input_ids"]], []) for t in texts]


def opts(out, steps, resume=False):
    return SimpleNamespace(
        threads=None,
        seed=0,
        seq_len=48,
        batch_size=4,
        from_=None,
        lr=1e-3,
        max_steps=steps,
        checkpoint_every=2,
        max_minutes=None,
        resume=resume,
        progress=False,
        out=out,
    )


res = {}
ALL = [(EAGLE3, None), (MEDUSA, ROOT / "models/tiny/medusa"), (DRAFT_TARGET, ROOT / "models/tiny/draft")]
ONLY = sys.argv[3].split(",") if len(sys.argv) > 3 else None
for mode, current in [m for m in ALL if ONLY is None or m[0] in ONLY]:
    d = OUT / mode
    t0 = time.monotonic()
    a = trainers.train(mode, TARGET, current, exs, opts(d / "a", STEPS), d / "a" / "art", "h")
    ta = time.monotonic() - t0
    b1 = trainers.train(mode, TARGET, current, exs, opts(d / "b", STEPS // 2), d / "b" / "art", "h")
    b2 = trainers.train(mode, TARGET, current, exs, opts(d / "b", STEPS, resume=True), d / "b" / "art", "h")
    ca, cb = latest_checkpoint(d / "a" / "checkpoints"), latest_checkpoint(d / "b" / "checkpoints")
    ta_, tb_ = load_trainable(ca), load_trainable(cb)
    diff = max(float((ta_[k].double() - tb_[k].double()).abs().max()) for k in ta_)
    res[mode] = {
        "seconds_straight": round(ta, 1),
        "steps": [a["steps"], b1["steps"], b2["steps"]],
        "resumed_from": b2["resumed_from"],
        "loss_straight": [e["loss"] for e in a["log"]],
        "loss_resumed": [e["loss"] for e in b2["log"]],
        "max_abs_param_diff": diff,
        "n_tensors": len(ta_),
        "prefixes": sorted({k.split(".")[0] for k in ta_}),
        "dtypes": sorted({str(v.dtype) for v in ta_.values()}),
        "ckpt_files": sorted(p.name for p in ca.iterdir()),
        "ckpt_mb": round(sum(p.stat().st_size for p in ca.iterdir()) / 1e6, 2),
        "export": sorted(a["export"])[:4] if isinstance(a["export"], dict) else None,
    }
    print(mode, json.dumps(res[mode]), flush=True)
print(json.dumps(res, indent=1))
