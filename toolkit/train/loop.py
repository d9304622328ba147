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
from typing import Any

from toolkit._fs import atomic_path, atomic_write
from toolkit.errors import UsageError

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

    params = [p for p in params if p.requires_grad]
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr,
        betas=(0.9, 0.95),
        eps=1e-8,
    )
    warmup = cfg.warmup if cfg.warmup is not None else max(1, min(100, cfg.max_steps // 15))
    gen = torch.Generator().manual_seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    start, ema, hist, resumed = 0, None, [], None
    ckpt_dir = Path(ckpt_dir)
    if resume:
        path = latest_checkpoint(ckpt_dir)
        if path is None:
            raise UsageError(f"--resume: no checkpoint in {ckpt_dir}", hint="run without --resume first")
        state = torch.load(path, weights_only=False)
        if state["fingerprint"] != fingerprint:
            raise UsageError(
                f"--resume: {path} was written by a run with other inputs (recipe, data, seed or head)",
                hint="resume with the same arguments, or start again without --resume",
            )
        with torch.no_grad():
            for p, v in zip(params, state["params"], strict=True):
                p.copy_(v)
        opt.load_state_dict(state["optimizer"])
        gen.set_state(state["generator"])
        torch.set_rng_state(state["torch_rng"])
        start, ema, hist, resumed = state["step"], state["ema"], state["log"], state["step"]

    def save(step: int) -> Path:
        path = ckpt_dir / f"step-{step:06d}.pt"
        if rank != 0:
            return path
        ckpt_dir.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp:
            torch.save(
                {
                    "step": step,
                    "fingerprint": fingerprint,
                    "params": [p.detach().clone() for p in params],
                    "optimizer": opt.state_dict(),
                    "generator": gen.get_state(),
                    "torch_rng": torch.get_rng_state(),
                    "ema": ema,
                    "log": hist,
                },
                tmp,
            )
        atomic_write(ckpt_dir / "latest.json", json.dumps({"file": path.name, "step": step}) + "\n")
        for old in sorted(ckpt_dir.glob("step-*.pt"))[:-CKPT_KEEP]:
            old.unlink()
        return path

    interrupted = False

    def on_sigint(_sig: int, _frame: Any) -> None:
        nonlocal interrupted
        interrupted = True

    main = threading.current_thread() is threading.main_thread()  # signals reach the main thread only
    previous = signal.signal(signal.SIGINT, on_sigint) if main else None
    bar = _Bar(progress and rank == 0, name, cfg.max_steps, start)
    t0 = time.monotonic()
    step, stopped, last_ckpt = start, "max_steps", None
    try:
        with bar:
            while step < cfg.max_steps:
                over = cfg.max_minutes is not None and time.monotonic() - t0 >= cfg.max_minutes * 60
                code = _agree(2 if interrupted else 1 if over else 0, world)
                if code:
                    stopped = "interrupted" if code == 2 else "max_minutes"
                    break
                for g in opt.param_groups:
                    g["lr"] = lr_at(step, cfg.max_steps, cfg.lr, warmup)
                loss, metrics = step_fn(gen)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, cfg.clip)
                opt.step()
                step += 1
                lv = float(loss.detach())
                ema = lv if ema is None else 0.9 * ema + 0.1 * lv
                hist.append(
                    {"step": step, "loss": round(lv, 5), **{k: round(v, 4) for k, v in metrics.items()}}
                )
                bar.update(step, lv, ema)
                if step % cfg.checkpoint_every == 0:
                    last_ckpt = save(step)
    finally:
        if main:
            signal.signal(signal.SIGINT, previous)
    if last_ckpt is None or not last_ckpt.name.endswith(f"{step:06d}.pt"):
        last_ckpt = save(step)  # budget, Ctrl-C or the last step: never lose the work done
    return LoopResult(
        steps=step,
        resumed_from=resumed,
        stopped=stopped,
        seconds=time.monotonic() - t0,
        final_loss_ema=round(ema, 5) if ema is not None else None,
        log=hist,
        checkpoint=str(last_ckpt),
    )


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
            from toolkit.progress import rich_bar

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
