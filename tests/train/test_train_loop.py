"""toolkit.train.loop on a small torch model: Ctrl-C saves a checkpoint, and `--resume` from it
takes exactly the steps an uninterrupted run takes (same batches, same numbers on CPU)."""

from __future__ import annotations

import os
import signal

import pytest

from toolkit.errors import UsageError
from toolkit.train.loop import LoopConfig, latest_checkpoint, run


def _model():
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def _step_fn(model, interrupt_at=None):
    import torch

    calls = {"n": 0}

    def step(gen):
        calls["n"] += 1
        if calls["n"] == interrupt_at:
            os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C, delivered mid-step
        x = torch.randn(4, 8, generator=gen)
        y = x.sum(-1, keepdim=True)
        loss = ((model(x) - y) ** 2).mean()
        return loss, {"abs": float(loss.detach().sqrt())}

    return step


def test_interrupt_then_resume_equals_an_uninterrupted_run(tmp_path):
    import torch

    cfg = LoopConfig(max_steps=6, lr=1e-2, checkpoint_every=4, seed=3)
    straight = _model()
    full = run("toy", list(straight.parameters()), _step_fn(straight), cfg, tmp_path / "a", progress=False)
    assert (full.steps, full.stopped, full.resumed_from) == (6, "max_steps", None)

    m = _model()
    first = run("toy", list(m.parameters()), _step_fn(m, interrupt_at=3), cfg, tmp_path / "b", progress=False)
    # the step that was running when Ctrl-C came finishes; the loop then checkpoints and stops
    assert (first.steps, first.stopped) == (3, "interrupted")
    assert latest_checkpoint(tmp_path / "b").name == "step-000003.pt"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler

    m2 = _model()  # a fresh process would start from these initial weights
    rest = run("toy", list(m2.parameters()), _step_fn(m2), cfg, tmp_path / "b", resume=True, progress=False)
    assert (rest.steps, rest.resumed_from, rest.stopped) == (6, 3, "max_steps")
    assert [e["loss"] for e in rest.log] == [e["loss"] for e in full.log]
    for a, b in zip(straight.parameters(), m2.parameters(), strict=True):
        assert torch.equal(a, b)


def test_resume_refuses_another_runs_checkpoint_and_a_missing_one(tmp_path):
    m = _model()
    cfg = LoopConfig(max_steps=2, checkpoint_every=1)
    run("toy", list(m.parameters()), _step_fn(m), cfg, tmp_path, progress=False, fingerprint="A")
    with pytest.raises(UsageError, match="other inputs"):
        run(
            "toy",
            list(m.parameters()),
            _step_fn(m),
            cfg,
            tmp_path,
            resume=True,
            progress=False,
            fingerprint="B",
        )
    with pytest.raises(UsageError, match="no checkpoint"):
        run("toy", list(m.parameters()), _step_fn(m), cfg, tmp_path / "none", resume=True, progress=False)


def test_budgets_and_bad_values():
    with pytest.raises(UsageError, match="max-steps"):
        LoopConfig(max_steps=0)
    with pytest.raises(UsageError, match="max-minutes"):
        LoopConfig(max_steps=1, max_minutes=0)
