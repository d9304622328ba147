"""Each trainable mode under the Trainer (toolkit.train.trainers): a run stopped at step 2 and
resumed to 4 equals one that ran 4 steps straight (on CPU, bit for bit), and a checkpoint holds the
trained head or draft alone, never the frozen target's weights."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from toolkit.modes import DRAFT_TARGET, EAGLE3, MEDUSA
from toolkit.train import trainers
from toolkit.train.data import Example
from toolkit.train.loop import TRAINABLE_FILE, latest_checkpoint, load_trainable

pytestmark = [pytest.mark.slow]
TINY = Path(__file__).resolve().parents[2] / "models" / "tiny"
TEXTS = [
    "def read_config(path):\n    with open(path) as f:\n        return json.load(f)\n",
    "class LRUCache:\n    def __init__(self, n):\n        self.n = n\n        self.d = {}\n",
    "for i in range(10):\n    print(i * i)\n",
]


def _opts(out: Path, steps: int, resume: bool = False) -> SimpleNamespace:
    return SimpleNamespace(
        threads=None, seed=0, seq_len=32, batch_size=2, from_=None, lr=1e-3, max_steps=steps,
        checkpoint_every=2, max_minutes=None, resume=resume, progress=False, out=out,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("mode", "current", "prefixes"),
    [
        (EAGLE3, None, {"eagle_module"}),
        (MEDUSA, TINY / "medusa", {"medusa_heads"}),
        (DRAFT_TARGET, TINY / "draft", {"model", "lm_head"}),  # the draft's own module: all of it trains
    ],
    ids=["eagle3", "medusa", "draft"],
)
def test_resumed_run_equals_a_straight_one_and_saves_the_trainable_tensors_only(
    tmp_path, mode, current, prefixes
):
    import torch
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(TINY / "target"))
    exs = [Example(t, [int(i) for i in tok(t)["input_ids"]], []) for t in TEXTS]

    def train(out: Path, steps: int, resume: bool = False) -> dict:
        return trainers.train(
            mode, TINY / "target", current, exs, _opts(out, steps, resume), out / "art", "h"
        )

    straight = train(tmp_path / "a", 4)
    first = train(tmp_path / "b", 2)
    rest = train(tmp_path / "b", 4, resume=True)
    assert (straight["steps"], first["steps"], rest["steps"], rest["resumed_from"]) == (4, 2, 4, 2)
    assert rest["log"] == straight["log"]

    ca, cb = (
        latest_checkpoint(tmp_path / "a" / "checkpoints"),
        latest_checkpoint(tmp_path / "b" / "checkpoints"),
    )
    assert ca is not None and cb is not None and ca.name == cb.name == "checkpoint-4"
    a, b = load_trainable(ca), load_trainable(cb)
    assert sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a)
    assert {k.split(".")[0] for k in a} == prefixes
    opt_state = torch.load(str(ca / "optimizer.pt"), weights_only=False)["state"].values()
    moments = sum(t.numel() for st in opt_state for k, t in st.items() if k in ("exp_avg", "exp_avg_sq"))
    assert moments == 2 * sum(v.numel() for v in a.values())  # AdamW's m and v, of these tensors only
    # a checkpoint is the trainable file, the Trainer's optimizer/scheduler/RNG/step state and sdtk.json
    assert not {p.name for p in ca.iterdir()} - {
        TRAINABLE_FILE, "optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json", "sdtk.json"
    }  # fmt: skip
