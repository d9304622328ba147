"""toolkit.train.loop (the Hugging Face Trainer under sdtk's callbacks) on a small torch model:
Ctrl-C saves a checkpoint, and `--resume` from it takes exactly the steps an uninterrupted run takes
(same batches, same numbers on CPU); checkpoints hold the trainable tensors only."""

from __future__ import annotations

import dataclasses
import json
import os
import signal

import pytest

from toolkit.errors import UsageError
from toolkit.train.loop import (
    STATE_FILE,
    TRAINABLE_FILE,
    LoopConfig,
    SeededItems,
    latest_checkpoint,
    load_trainable,
    lr_at,
    run,
)


def _model():
    import torch

    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    frozen = torch.nn.Linear(8, 8)  # a stand-in for the frozen target: never trained, never saved
    frozen.requires_grad_(False)
    m.add_module("frozen", frozen)
    return m


def _item(gen):
    import torch

    return torch.randn(8, generator=gen)


def _step_fn(interrupt_at=None):
    calls = {"n": 0}

    def step(model, x):
        calls["n"] += 1
        if calls["n"] == interrupt_at:
            os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C, delivered mid-step
        y = x.sum(-1, keepdim=True)
        pred = model[2](model[1](model[0](x)))
        loss = ((pred - y) ** 2).mean()
        return loss, {"abs": float(loss.detach().sqrt())}

    return step


def _run(model, step, cfg, ckpt, **kw):
    """`kw`: LoopConfig fields (resume, fingerprint) changed for this run."""
    return run("toy", model, step, _item, dataclasses.replace(cfg, **kw), ckpt, progress=False)


def test_interrupt_then_resume_equals_an_uninterrupted_run(tmp_path):
    import torch

    cfg = LoopConfig(max_steps=6, lr=1e-2, checkpoint_every=4, seed=3, batch_size=4)
    straight = _model()
    full = _run(straight, _step_fn(), cfg, tmp_path / "a")
    assert (full.steps, full.stopped, full.resumed_from) == (6, "max_steps", None)
    # checkpoints every 4 steps and at the last one; the newest CKPT_KEEP (2) kept
    assert sorted(p.name for p in (tmp_path / "a").glob("checkpoint-*")) == ["checkpoint-4", "checkpoint-6"]

    m = _model()
    # The handler in place before the run, restored after it (the default one; SIG_IGN when the
    # suite runs as a background job, whose shell ignores SIGINT).
    before = signal.getsignal(signal.SIGINT)
    first = _run(m, _step_fn(interrupt_at=3), cfg, tmp_path / "b")
    # the step that was running when Ctrl-C came finishes; the loop then checkpoints and stops
    assert (first.steps, first.stopped) == (3, "interrupted")
    ckpt = latest_checkpoint(tmp_path / "b")
    assert ckpt is not None and ckpt.name == "checkpoint-3" and first.checkpoint == str(ckpt)
    assert signal.getsignal(signal.SIGINT) is before
    # the trainable tensors only, never the frozen module's; and the Trainer's optimizer/RNG state
    assert sorted(load_trainable(ckpt)) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    assert {TRAINABLE_FILE, STATE_FILE, "optimizer.pt", "scheduler.pt", "trainer_state.json"} <= {
        p.name for p in ckpt.iterdir()
    }
    assert json.loads((ckpt / STATE_FILE).read_text())["step"] == 3

    m2 = _model()  # a fresh process would start from these initial weights
    rest = _run(m2, _step_fn(), cfg, tmp_path / "b", resume=True)
    assert (rest.steps, rest.resumed_from, rest.stopped) == (6, 3, "max_steps")
    assert [e["loss"] for e in rest.log] == [e["loss"] for e in full.log]
    for a, b in zip(straight.parameters(), m2.parameters(), strict=True):
        assert torch.equal(a, b)


def test_resume_with_a_larger_budget_follows_its_schedule(tmp_path):
    """2 steps of a 2-step budget, resumed to 4, equal 4 steps straight: the first two steps have the
    same lr under both budgets (1 warm-up step, then the cosine's top), the last two the 4-step
    budget's, not the lr the optimizer saved at the end of the 2-step schedule."""
    import torch

    straight = _model()
    full = _run(straight, _step_fn(), LoopConfig(max_steps=4, lr=1e-2, seed=1, batch_size=3), tmp_path / "a")
    m = _model()
    _run(m, _step_fn(), LoopConfig(max_steps=2, lr=1e-2, seed=1, batch_size=3), tmp_path / "b")
    m2 = _model()
    rest = _run(
        m2, _step_fn(), LoopConfig(max_steps=4, lr=1e-2, seed=1, batch_size=3), tmp_path / "b", resume=True
    )
    assert (rest.steps, rest.resumed_from) == (4, 2)
    assert [e["loss"] for e in rest.log] == [e["loss"] for e in full.log]
    for a, b in zip(straight.parameters(), m2.parameters(), strict=True):
        assert torch.equal(a, b)


def test_resume_refuses_another_runs_checkpoint_and_a_missing_one(tmp_path):
    cfg = LoopConfig(max_steps=2, checkpoint_every=1, batch_size=2)
    _run(_model(), _step_fn(), cfg, tmp_path, fingerprint="A")
    with pytest.raises(UsageError, match="other inputs"):
        _run(_model(), _step_fn(), cfg, tmp_path, resume=True, fingerprint="B")
    with pytest.raises(UsageError, match="no checkpoint"):
        _run(_model(), _step_fn(), cfg, tmp_path / "none", resume=True)


def test_max_minutes_stops_after_the_step_and_saves(tmp_path):
    cfg = LoopConfig(max_steps=50, checkpoint_every=100, batch_size=2, max_minutes=1e-9)
    res = _run(_model(), _step_fn(), cfg, tmp_path)
    assert (res.steps, res.stopped) == (1, "max_minutes")
    assert latest_checkpoint(tmp_path).name == "checkpoint-1"


def test_items_depend_on_seed_and_index_only_and_the_schedule():
    import torch

    a, b = SeededItems(_item, 10, seed=1), SeededItems(_item, 99, seed=1)
    assert all(torch.equal(a[i]["input_ids"], b[i]["input_ids"]) for i in range(10))
    assert not torch.equal(a[0]["input_ids"], SeededItems(_item, 10, seed=2)[0]["input_ids"])
    with pytest.raises(IndexError):
        a[10]
    # warm-up to the peak, then cosine down to a tenth of it
    lrs = [lr_at(s, 100, 1.0, 10) for s in range(101)]
    assert lrs[9] == 1.0 and lrs[0] == 0.1 and abs(lrs[100] - 0.1) < 1e-9
    assert all(x >= y for x, y in zip(lrs[9:], lrs[10:], strict=False))


def test_budgets_and_bad_values():
    with pytest.raises(UsageError, match="max-steps"):
        LoopConfig(max_steps=0)
    with pytest.raises(UsageError, match="max-minutes"):
        LoopConfig(max_steps=1, max_minutes=0)
    with pytest.raises(UsageError, match="batch-size"):
        LoopConfig(max_steps=1, batch_size=0)
