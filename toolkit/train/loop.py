"""The training loop of `sdtk train-draft`: AdamW with warm-up and cosine decay, seeded batches,
checkpoints every N steps, `--resume`, step and wall-clock budgets, and Ctrl-C that saves a checkpoint.

A checkpoint holds everything the next step depends on (the trainable tensors, the optimizer state,
the batch generator's and torch's RNG states, the step and the loss history), so a resumed run takes
the same steps as one that never stopped: the same batches in the same order, on CPU the same numbers.
"""

from __future__ import annotations

import json
import math
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit._fs import atomic_path, atomic_write
from toolkit.errors import UsageError
from toolkit.progress import rich_bar

if TYPE_CHECKING:
    import torch

CKPT_KEEP = 2  # the newest checkpoints kept on disk


@dataclass
class LoopConfig:
    max_steps: int
    lr: float = 1e-3
    warmup: int | None = None  # default: max_steps // 15, 1..100
    weight_decay: float = 0.0
    checkpoint_every: int = 50
    max_minutes: float | None = None
    seed: int = 0
    clip: float = 1.0

    def __post_init__(self) -> None:
        if self.max_steps < 1:
            raise UsageError(f"--max-steps must be ≥ 1, got {self.max_steps}")
        if self.checkpoint_every < 1:
            raise UsageError(f"--checkpoint-every must be ≥ 1, got {self.checkpoint_every}")
        if self.max_minutes is not None and self.max_minutes <= 0:
            raise UsageError(f"--max-minutes must be > 0, got {self.max_minutes}")


@dataclass
class LoopResult:
    steps: int  # steps done in total (resumed ones included)
    resumed_from: int | None
    stopped: str  # "max_steps" | "max_minutes" | "interrupted"
    seconds: float  # this run's training time
    final_loss_ema: float | None
    log: list[dict[str, float]] = field(default_factory=list)
    checkpoint: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "resumed_from": self.resumed_from,
            "stopped": self.stopped,
            "seconds": round(self.seconds, 1),
            "final_loss_ema": self.final_loss_ema,
            "checkpoint": self.checkpoint,
            "log": self.log,
        }


def lr_at(step: int, steps: int, peak: float, warmup: int, floor: float = 0.1) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    prog = (step - warmup) / max(1, steps - warmup)
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, prog))))


def latest_checkpoint(ckpt_dir: Path) -> Path | None:
    pointer = Path(ckpt_dir) / "latest.json"
    if not pointer.exists():
        return None
    p = Path(ckpt_dir) / json.loads(pointer.read_text())["file"]
    return p if p.exists() else None


def run(
    name: str,
    params: Sequence[Any],
    step_fn: Callable[[Any], tuple[Any, dict[str, float]]],
    cfg: LoopConfig,
    ckpt_dir: Path,
    *,
    resume: bool = False,
    progress: bool = True,
    fingerprint: str = "",
) -> LoopResult:
    """Train `params` with `step_fn(generator) -> (loss, metrics)`; the generator draws the batches.

    `fingerprint` identifies the run's inputs; a checkpoint of another run is not resumed.
    Under torch.distributed (torchrun) every rank keeps the same generator (step_fn takes its own
    slice of each global batch and runs its forward through DistributedDataParallel, which
    averages the gradients across ranks in backward), the ranks agree on when to stop, and rank 0
    writes the checkpoints."""
    import torch

    world, rank = dist_world()

    trainable = [p for p in params if p.requires_grad]
    opt = _optimizer(trainable, cfg)
    warmup = cfg.warmup if cfg.warmup is not None else max(1, min(100, cfg.max_steps // 15))
    gen = torch.Generator().manual_seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    st = _Training(trainable, opt, gen, Path(ckpt_dir), fingerprint, rank)
    if resume:
        st.load()

    bar = _Bar(progress and rank == 0, name, cfg.max_steps, st.step)
    t0 = time.monotonic()
    with _Sigint() as sigint, bar:
        stopped, last_ckpt = _train(st, step_fn, cfg, warmup, world, bar, sigint, t0)
    if last_ckpt is None or not last_ckpt.name.endswith(f"{st.step:06d}.pt"):
        last_ckpt = st.save()  # budget, Ctrl-C or the last step: never lose the work done
    return LoopResult(
        steps=st.step,
        resumed_from=st.resumed,
        stopped=stopped,
        seconds=time.monotonic() - t0,
        final_loss_ema=round(st.ema, 5) if st.ema is not None else None,
        log=st.hist,
        checkpoint=str(last_ckpt),
    )


def _optimizer(params: list[torch.Tensor], cfg: LoopConfig) -> torch.optim.AdamW:
    """AdamW, weight decay on matrices only."""
    import torch

    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr,
        betas=(0.9, 0.95),
        eps=1e-8,
    )


@dataclass
class _Training:
    """What a checkpoint holds and each step advances: the trainable tensors, the optimizer, the
    batch generator, the step, the loss's moving average and the log."""

    params: list[torch.Tensor]
    opt: torch.optim.Optimizer
    gen: torch.Generator
    ckpt_dir: Path
    fingerprint: str
    rank: int  # only rank 0 writes checkpoints
    step: int = 0
    ema: float | None = None
    hist: list[dict[str, float]] = field(default_factory=list)
    resumed: int | None = None  # the step resumed from

    def load(self) -> None:
        """Continue from the newest checkpoint; UsageError if there is none, or it is another run's."""
        import torch

        path = latest_checkpoint(self.ckpt_dir)
        if path is None:
            raise UsageError(f"--resume: no checkpoint in {self.ckpt_dir}", hint="run without --resume first")
        state = torch.load(path, weights_only=False)
        if state["fingerprint"] != self.fingerprint:
            raise UsageError(
                f"--resume: {path} was written by a run with other inputs (recipe, data, seed or head)",
                hint="resume with the same arguments, or start again without --resume",
            )
        with torch.no_grad():
            for p, v in zip(self.params, state["params"], strict=True):
                p.copy_(v)
        self.opt.load_state_dict(state["optimizer"])
        self.gen.set_state(state["generator"])
        torch.set_rng_state(state["torch_rng"])
        self.step, self.ema, self.hist, self.resumed = (
            state["step"],
            state["ema"],
            state["log"],
            state["step"],
        )

    def save(self) -> Path:
        """Checkpoint the current step (rank 0 writes it; the others return its path)."""
        import torch

        path = self.ckpt_dir / f"step-{self.step:06d}.pt"
        if self.rank != 0:
            return path
        self.ckpt_dir.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp:
            torch.save(
                {
                    "step": self.step,
                    "fingerprint": self.fingerprint,
                    "params": [p.detach().clone() for p in self.params],
                    "optimizer": self.opt.state_dict(),
                    "generator": self.gen.get_state(),
                    "torch_rng": torch.get_rng_state(),
                    "ema": self.ema,
                    "log": self.hist,
                },
                tmp,
            )
        atomic_write(self.ckpt_dir / "latest.json", json.dumps({"file": path.name, "step": self.step}) + "\n")
        for old in sorted(self.ckpt_dir.glob("step-*.pt"))[:-CKPT_KEEP]:
            old.unlink()
        return path


class _Sigint:
    """Within it, Ctrl-C sets `hit` instead of raising, so that the loop stops after the step and
    saves a checkpoint. Signals reach the main thread only: elsewhere it changes nothing."""

    def __init__(self) -> None:
        self.hit = False
        self.main = threading.current_thread() is threading.main_thread()
        self.previous: Any = None

    def __enter__(self) -> _Sigint:
        if self.main:
            self.previous = signal.signal(signal.SIGINT, self._on_sigint)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.main:
            signal.signal(signal.SIGINT, self.previous)

    def _on_sigint(self, _sig: int, _frame: Any) -> None:
        self.hit = True


def _train(
    st: _Training,
    step_fn: Callable[[Any], tuple[Any, dict[str, float]]],
    cfg: LoopConfig,
    warmup: int,
    world: int,
    bar: _Bar,
    sigint: _Sigint,
    t0: float,
) -> tuple[str, Path | None]:
    """Steps until max_steps, the wall-clock budget or Ctrl-C (on any rank); checkpoints every
    `checkpoint_every` steps. Returns why it stopped and the last checkpoint written."""
    import torch

    stopped, last_ckpt = "max_steps", None
    while st.step < cfg.max_steps:
        over = cfg.max_minutes is not None and time.monotonic() - t0 >= cfg.max_minutes * 60
        code = _agree(2 if sigint.hit else 1 if over else 0, world)
        if code:
            stopped = "interrupted" if code == 2 else "max_minutes"
            break
        for g in st.opt.param_groups:
            g["lr"] = lr_at(st.step, cfg.max_steps, cfg.lr, warmup)
        loss, metrics = step_fn(st.gen)
        st.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(st.params, cfg.clip)
        st.opt.step()
        st.step += 1
        lv = float(loss.detach())
        st.ema = lv if st.ema is None else 0.9 * st.ema + 0.1 * lv
        st.hist.append(
            {"step": st.step, "loss": round(lv, 5), **{k: round(v, 4) for k, v in metrics.items()}}
        )
        bar.update(st.step, lv, st.ema)
        if st.step % cfg.checkpoint_every == 0:
            last_ckpt = st.save()
    return stopped, last_ckpt


def dist_world() -> tuple[int, int]:
    """(world size, rank): (1, 0) outside torch.distributed."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0


def _agree(code: int, world: int) -> int:
    """The largest stop code of any rank (0 go on, 1 budget spent, 2 Ctrl-C), so all stop together."""
    if world == 1:
        return code
    import torch
    import torch.distributed as dist

    t = torch.tensor([code], dtype=torch.int64)
    if dist.get_backend() == "nccl":
        t = t.cuda()
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


class _Bar:
    """A rich progress bar on stderr: step M/N, loss, its moving average, elapsed and ETA."""

    def __init__(self, enabled: bool, name: str, total: int, start: int):
        self.bar: Any = None
        self.task: Any = None
        if enabled:
            self.bar = rich_bar(f"[bold]train {name}", "loss {task.fields[loss]} (avg {task.fields[ema]})")
            self.task = self.bar.add_task("train", total=total, completed=start, loss="-", ema="-")

    def __enter__(self) -> _Bar:
        if self.bar is not None:
            self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()

    def update(self, step: int, loss: float, ema: float) -> None:
        if self.bar is not None:
            self.bar.update(self.task, completed=step, loss=f"{loss:.4f}", ema=f"{ema:.4f}")
