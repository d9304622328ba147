"""The training loop of `sdtk train-draft`: the Hugging Face `Trainer` (as ModelOpt's speculative
examples use it), with AdamW, warm-up and cosine decay, gradient clipping, checkpoints every N steps,
`--resume`, step and wall-clock budgets, Ctrl-C that saves a checkpoint, and a rich progress bar.

What sdtk adds to the Trainer:
- Batches: a map-style dataset whose item i is drawn from a generator seeded by (seed, i), read in
  order. Step k's global batch is items k·B·W … (k+1)·B·W - 1 (B per process, W processes), the same
  whether one process or W ranks draw it; a resumed run skips the trained batches by index (the
  Trainer's own data skip) and takes the same batches as one that never stopped.
- Checkpoints (`OUT/checkpoints/checkpoint-<step>/`, the newest CKPT_KEEP kept) hold only the
  trainable tensors (`trainable.safetensors`: the head or the draft, never the frozen target), plus
  the Trainer's optimizer, scheduler, RNG and step state, and `sdtk.json`: the run's fingerprint,
  the loss log and its moving average. `sdtk.json` is written last (atomically): a checkpoint
  without it is incomplete and never resumed.
- Budgets and Ctrl-C: a callback stops after the running step and saves (under torchrun the ranks
  agree first, so all stop at the same step).
- stdout stays the `--json` data: the Trainer's printer and tqdm are off; progress goes to stderr.

Under torchrun the Trainer wraps the module in DistributedDataParallel (gradients all-reduced in
backward) and gives each rank its share of every global batch; rank 0 writes the checkpoints.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit._fs import atomic_path, atomic_write
from toolkit.errors import ModelError, UsageError
from toolkit.progress import rich_bar

if TYPE_CHECKING:
    import torch

CKPT_KEEP = 2  # the newest checkpoints kept on disk
TRAINABLE_FILE = "trainable.safetensors"  # in a checkpoint: the trainable tensors by name
STATE_FILE = "sdtk.json"  # in a checkpoint, written last: fingerprint, step, loss log

StepFn = Callable[[Any, Any], tuple[Any, dict[str, float]]]  # (module, batch) -> (loss, metrics)
ItemFn = Callable[[Any], Any]  # (torch.Generator) -> one sample (a tensor)


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
    batch_size: int = 8  # per process
    resume: bool = False  # from the latest checkpoint in the run's checkpoint directory
    fingerprint: str = ""  # identifies the run's inputs; a checkpoint of another run is not resumed

    def __post_init__(self) -> None:
        if self.max_steps < 1:
            raise UsageError(f"--max-steps must be ≥ 1, got {self.max_steps}")
        if self.checkpoint_every < 1:
            raise UsageError(f"--checkpoint-every must be ≥ 1, got {self.checkpoint_every}")
        if self.max_minutes is not None and self.max_minutes <= 0:
            raise UsageError(f"--max-minutes must be > 0, got {self.max_minutes}")
        if self.batch_size < 1:
            raise UsageError(f"--batch-size must be ≥ 1, got {self.batch_size}")

    @property
    def warmup_steps(self) -> int:
        return self.warmup if self.warmup is not None else max(1, min(100, self.max_steps // 15))


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
    """Linear warm-up to `peak`, then cosine decay to `floor`·peak at `steps`."""
    if step < warmup:
        return peak * (step + 1) / warmup
    prog = (step - warmup) / max(1, steps - warmup)
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, prog))))


def latest_checkpoint(ckpt_dir: Path) -> Path | None:
    """The newest complete checkpoint (`checkpoint-<step>/` with its sdtk.json) in `ckpt_dir`."""
    done = [p for p in Path(ckpt_dir).glob("checkpoint-*") if (p / STATE_FILE).exists()]
    done = [p for p in done if p.name.removeprefix("checkpoint-").isdigit()]
    return max(done, key=lambda p: int(p.name.removeprefix("checkpoint-")), default=None)


def load_trainable(checkpoint: Path) -> dict[str, torch.Tensor]:
    """A checkpoint's trainable tensors, by parameter name."""
    from safetensors.torch import load_file

    return load_file(str(Path(checkpoint) / TRAINABLE_FILE))


def item_seed(seed: int, index: int) -> int:
    """The generator seed of dataset item `index`: independent of the world size and the batch size."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{index}".encode()).digest()[:8], "little") >> 1


class SeededItems:
    """A map-style dataset of `length` items; item i = `make(generator seeded by (seed, i))`."""

    def __init__(self, make: ItemFn, length: int, seed: int):
        self.make, self.length, self.seed = make, length, seed

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> dict[str, Any]:
        import torch

        if not 0 <= i < self.length:
            raise IndexError(i)
        return {"input_ids": self.make(torch.Generator().manual_seed(item_seed(self.seed, i)))}


def _collate(items: list[dict[str, Any]]) -> dict[str, Any]:
    import torch

    return {"input_ids": torch.stack([it["input_ids"] for it in items])}


@dataclass
class _Run:
    """What one run tracks besides the Trainer's own state: the loss log, its moving average, the
    last step's loss and metrics, why it stopped, and the step it resumed from."""

    fingerprint: str
    ema: float | None = None
    hist: list[dict[str, float]] = field(default_factory=list)
    last: tuple[float, dict[str, float]] = (math.nan, {})
    stopped: str = "max_steps"
    resumed: int | None = None

    def restore(self, checkpoint: Path) -> None:
        st = json.loads((checkpoint / STATE_FILE).read_text())
        if st["fingerprint"] != self.fingerprint:
            raise UsageError(
                f"--resume: {checkpoint} was written by a run with other inputs (recipe, data, seed or head)",
                hint="resume with the same arguments, or start again without --resume",
            )
        self.ema, self.hist, self.resumed = st["ema"], st["log"], st["step"]

    def record(self, step: int) -> tuple[float, float]:
        lv, metrics = self.last
        self.ema = lv if self.ema is None else 0.9 * self.ema + 0.1 * lv
        self.hist.append({"step": step, "loss": round(lv, 5), **{k: round(v, 4) for k, v in metrics.items()}})
        return lv, self.ema


def run(
    name: str,
    module: Any,
    step_fn: StepFn,
    make_item: ItemFn,
    cfg: LoopConfig,
    ckpt_dir: Path,
    *,
    progress: bool = True,
) -> LoopResult:
    """Train `module`'s trainable parameters (those with requires_grad) with the Trainer:
    `step_fn(module, batch) -> (loss, metrics)` on batches of `make_item` samples.

    `cfg.fingerprint` identifies the run's inputs; a checkpoint of another run is not resumed."""
    ckpt_dir = Path(ckpt_dir)
    state = _Run(cfg.fingerprint)
    start = None
    if cfg.resume:
        start = latest_checkpoint(ckpt_dir)
        if start is None:
            raise UsageError(f"--resume: no checkpoint in {ckpt_dir}", hint="run without --resume first")
        state.restore(start)
    world, rank = dist_world()
    trainer = _make_trainer(module, step_fn, make_item, cfg, ckpt_dir, state, world)
    bar = _Bar(progress and rank == 0, name, cfg.max_steps)
    t0 = time.monotonic()
    # stdout carries the --json data: whatever the Trainer or ModelOpt print goes to stderr
    with _Sigint() as sigint, bar, contextlib.redirect_stdout(sys.stderr):
        trainer.add_callback(_control(cfg, state, bar, world, sigint, t0))
        trainer.train(resume_from_checkpoint=str(start) if start is not None else None)
    last = latest_checkpoint(ckpt_dir)
    return LoopResult(
        steps=int(trainer.state.global_step),
        resumed_from=state.resumed,
        stopped=state.stopped,
        seconds=time.monotonic() - t0,
        final_loss_ema=round(state.ema, 5) if state.ema is not None else None,
        log=state.hist,
        checkpoint=str(last) if last is not None else None,
    )


def _make_trainer(
    module: Any, step_fn: StepFn, make_item: ItemFn, cfg: LoopConfig, ckpt_dir: Path, state: _Run, world: int
) -> Any:
    """A Trainer over `SeededItems` read in order, with sdtk's optimizer and schedule, no logging
    to stdout and no tqdm, checkpoints every `cfg.checkpoint_every` steps."""
    import torch
    from transformers import PrinterCallback, ProgressCallback, TrainingArguments

    args = TrainingArguments(
        output_dir=str(ckpt_dir),
        max_steps=cfg.max_steps,
        per_device_train_batch_size=cfg.batch_size,
        gradient_accumulation_steps=1,
        max_grad_norm=cfg.clip,
        seed=cfg.seed,
        data_seed=cfg.seed,
        train_sampling_strategy="sequential",
        save_strategy="steps",
        save_steps=cfg.checkpoint_every,
        save_total_limit=CKPT_KEEP,
        logging_strategy="no",
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
        dataloader_pin_memory=False,
        remove_unused_columns=False,
        use_cpu=not torch.cuda.is_available(),
        ddp_find_unused_parameters=True,  # ModelOpt's heads need not use every parameter each step
    )
    opt = _optimizer([p for p in module.parameters() if p.requires_grad], cfg)
    warmup = cfg.warmup_steps
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_at(s, cfg.max_steps, 1.0, warmup))
    items = SeededItems(make_item, cfg.max_steps * cfg.batch_size * world, cfg.seed)
    trainer = _trainer_class()(
        model=module,
        args=args,
        train_dataset=items,
        data_collator=_collate,
        optimizers=(opt, sched),
    )
    trainer.sdtk_step, trainer.sdtk_run = step_fn, state
    trainer.model_accepts_loss_kwargs = False  # the loss is step_fn's, averaged over its batch
    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    return trainer


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


def _trainable(model: Any) -> dict[str, Any]:
    return {n: p for n, p in model.named_parameters() if p.requires_grad}


def _trainer_class() -> type:
    """transformers.Trainer with sdtk's loss and checkpoints of the trainable tensors only (built
    on first use: transformers is imported lazily)."""
    from transformers import Trainer

    class SdtkTrainer(Trainer):
        sdtk_step: StepFn
        sdtk_run: _Run

        def compute_loss(
            self,
            model: Any,
            inputs: dict[str, Any],
            return_outputs: bool = False,
            num_items_in_batch: Any = None,
        ) -> Any:
            loss, metrics = self.sdtk_step(model, inputs["input_ids"])
            self.sdtk_run.last = (float(loss.detach()), metrics)
            return loss

        def _save(self, output_dir: str | None = None, state_dict: dict[str, Any] | None = None) -> None:
            from safetensors.torch import save_file

            out = Path(output_dir or str(self.args.output_dir))
            tensors = {
                n: p.detach().cpu().contiguous()
                for n, p in _trainable(self.accelerator.unwrap_model(self.model)).items()
            }
            with atomic_path(out / TRAINABLE_FILE) as tmp:
                save_file(tensors, str(tmp), metadata={"format": "pt"})

        def _load_from_checkpoint(self, resume_from_checkpoint: str, model: Any = None) -> None:
            import torch

            own = _trainable(model if model is not None else self.model)
            saved = load_trainable(Path(resume_from_checkpoint))
            if set(saved) != set(own):
                raise ModelError(
                    f"{resume_from_checkpoint}: its trainable tensors differ from this run's "
                    f"({sorted(set(saved) ^ set(own))[:4]})",
                    hint="resume with the same arguments, or start again without --resume",
                )
            with torch.no_grad():
                for n, p in own.items():
                    p.copy_(saved[n])

        def _save_checkpoint(self, model: Any, trial: Any) -> None:
            super()._save_checkpoint(model, trial)
            if self.args.should_save:  # rank 0, last: the checkpoint is complete
                step = int(self.state.global_step)
                r = self.sdtk_run
                body = {"fingerprint": r.fingerprint, "step": step, "ema": r.ema, "log": r.hist}
                atomic_write(
                    Path(str(self.args.output_dir)) / f"checkpoint-{step}" / STATE_FILE, json.dumps(body)
                )

    return SdtkTrainer


def _control(cfg: LoopConfig, run: _Run, bar: _Bar, world: int, sigint: _Sigint, t0: float) -> Any:
    """The Trainer callback of a run: records each step's loss, moves the bar, and stops (and saves)
    on the wall-clock budget or Ctrl-C; the last step is always saved."""
    from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

    class Control(TrainerCallback):
        def on_train_begin(
            self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
        ) -> None:
            # The optimizer's saved lr is the step's lr under the checkpoint's budget; a resumed run
            # with another --max-steps follows the new budget's schedule from its first step on.
            warmup = cfg.warmup_steps
            for g in kwargs["optimizer"].param_groups:
                g["lr"] = cfg.lr * lr_at(int(state.global_step), cfg.max_steps, 1.0, warmup)
            bar.begin(int(state.global_step))

        def on_step_end(
            self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
        ) -> None:
            step = int(state.global_step)
            lv, ema = run.record(step)
            bar.update(step, lv, ema)
            over = cfg.max_minutes is not None and time.monotonic() - t0 >= cfg.max_minutes * 60
            code = _agree(2 if sigint.hit else 1 if over else 0, world)
            if code and step < state.max_steps:
                run.stopped = "interrupted" if code == 2 else "max_minutes"
                control.should_training_stop = True
            if control.should_training_stop or step >= state.max_steps:
                control.should_save = True  # budget, Ctrl-C or the last step: never lose the work done

    return Control()


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

    def __init__(self, enabled: bool, name: str, total: int):
        self.enabled, self.name, self.total = enabled, name, total
        self.bar: Any = None
        self.task: Any = None

    def __enter__(self) -> _Bar:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()

    def begin(self, start: int) -> None:
        """Started by the Trainer's on_train_begin, once a resumed run knows its step."""
        if self.enabled and self.bar is None:
            self.bar = rich_bar(
                f"[bold]train {self.name}", "loss {task.fields[loss]} (avg {task.fields[ema]})"
            )
            self.task = self.bar.add_task("train", total=self.total, completed=start, loss="-", ema="-")
            self.bar.start()

    def update(self, step: int, loss: float, ema: float) -> None:
        if self.bar is not None:
            self.bar.update(self.task, completed=step, loss=f"{loss:.4f}", ema=f"{ema:.4f}")
