"""`sdtk train-draft RECIPE --data WORKLOAD --out DIR`: train the draft for the user's workload, then
measure on a held-out split whether it helped.

1. The workload is split (toolkit.train.data.split); the hold-out prompts are never trained on.
2. The target generates its own responses to the training prompts (self-distillation), cached in
   DIR/data with a hash of their inputs.
3. Before: acceptance per position, τ and the predicted speedup of RECIPE on the hold-out split,
   by `sdtk plan`'s code (toolkit.train.evaluate).
4. Training (toolkit.train.loop: the Hugging Face Trainer) with the mode's trainer
   (toolkit.train.trainers): EAGLE-3 and Medusa with ModelOpt, a draft model by distillation.
5. Export in the layout `sdtk build` and the upstream converters read, an overlay recipe
   DIR/<recipe>-trained.yaml that points at it, the same numbers after, and DIR/train_report.json.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit import hub
from toolkit._fs import atomic_write
from toolkit.errors import ModelError, SdtkError, UsageError, require_extra
from toolkit.modes import REGISTRY
from toolkit.progress import Step, quiet
from toolkit.recipe import load_recipe, load_yaml, resolve_recipe_path
from toolkit.train import data as data_mod
from toolkit.train.evaluate import holdout_metrics
from toolkit.train.trainers import train

# mode -> the `models` field the trained artifact replaces, and its directory under OUT (each
# mode's ModeInfo.training).
TRAINABLE = {m.name: m.training.replaces for m in REGISTRY if m.training is not None}
HEAD_DIRS = {m.name: m.training.directory for m in REGISTRY if m.training is not None}


@dataclass
class TrainOptions:
    data: str
    out: Path
    from_: Path | None = None
    generate_with: str | None = None
    holdout: float = 0.25
    seed: int = 0
    max_steps: int = 200
    max_minutes: float | None = None
    checkpoint_every: int = 50
    resume: bool = False
    batch_size: int = 8
    seq_len: int = 256
    lr: float = 1e-3
    gen_tokens: int = 128
    eval_tokens: int = 64
    threads: int | None = None
    draft_vocab: int | None = None  # EAGLE-3 from scratch: the reduced draft vocabulary (d2t)
    progress: bool = True


@dataclass
class TrainResult:
    recipe: str
    mode: str
    out: Path
    artifact: Path
    overlay: Path
    report_path: Path
    before: dict[str, Any]
    after: dict[str, Any]
    training: dict[str, Any]
    data: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def next_command(self) -> str:
        return f"sdtk bench --compare {self.recipe} {self.overlay} --prompts {self.data['holdout_file']}"

    def to_dict(self) -> dict[str, Any]:
        tau_b, tau_a = self.before.get("tau"), self.after.get("tau")
        return {
            "recipe": self.recipe,
            "mode": self.mode,
            "out": str(self.out),
            "artifact": str(self.artifact),
            "overlay": str(self.overlay),
            "report": str(self.report_path),
            "data": self.data,
            "training": self.training,
            "holdout": {
                "before": self.before,
                "after": self.after,
                "tau_ratio": round(tau_a / tau_b, 4) if tau_a and tau_b else None,
            },
            **self.extra,
            "next": self.next_command,
        }


def train_draft(recipe: str | Path, opts: TrainOptions, *, progress: Step = quiet) -> TrainResult | None:
    """Train and report; under torchrun only rank 0 returns the result (the others None)."""
    rpath = resolve_recipe_path(recipe)
    rec = load_recipe(rpath)
    mode = rec.speculative.mode
    if mode not in TRAINABLE:
        raise UsageError(
            f"train-draft trains {', '.join(TRAINABLE)} so far; {rpath.name} uses mode {mode}",
            hint="use a recipe with an EAGLE-3 head, Medusa heads or a draft model",
        )
    require_extra("reference")  # torch and transformers: the target, self-distillation, the probes
    require_extra("train")  # ModelOpt and accelerate, checked before minutes of distillation
    target = _target_dir(rec)
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.monotonic()
    rank = _init_distributed()

    name, prompts = data_mod.load_prompts(opts.data)
    train_p, held_p = data_mod.split(prompts, opts.holdout, opts.seed)
    holdout_file = out / "data" / "holdout.jsonl"
    before: dict[str, Any] = {}
    if rank == 0:  # data and the "before" numbers once; the other ranks read the cache
        data_mod.write_prompts(holdout_file, held_p)
        data_mod.write_prompts(out / "data" / "train.jsonl", train_p)
        progress(f"data: {name}, {len(train_p)} training and {len(held_p)} held-out prompts")
        progress("self-distillation: the target's greedy responses to the training prompts")

    def distill() -> tuple[Any, dict[str, Any]]:  # the cached set, once rank 0 has written it
        return data_mod.self_distill(
            train_p, target=target, cache_dir=out / "data", max_new=opts.gen_tokens,
            generate_with=opts.generate_with,
        )  # fmt: skip

    t = time.monotonic()
    if rank == 0:
        examples, gen_info = distill()
        gen_info["seconds"] = round(time.monotonic() - t, 1)
        progress(
            f"self-distillation: {gen_info['tokens']} tokens "
            + ("(cached)" if gen_info["cached"] else f"in {gen_info['seconds']} s")
        )

        t = time.monotonic()
        progress(f"before: plan's probe of {rpath.name} on the hold-out split")
        try:
            before = holdout_metrics(rpath, holdout_file, tokens=opts.eval_tokens, seed=opts.seed, threads=1)
        except ModelError as e:  # nothing to probe yet: an mtp recipe whose target has no MTP layers
            before = {"skipped": str(e)}
        before["seconds"] = round(time.monotonic() - t, 1)
    _barrier()
    if rank != 0:
        examples, gen_info = distill()

    artifact = out / HEAD_DIRS[mode]

    current = rec.local_path(getattr(rec.models, TRAINABLE[mode]))
    training = train(mode, target, current, examples, opts, artifact, gen_info["input_hash"], rank=rank)
    if rank != 0:
        return None
    if training["stopped"] == "interrupted":
        raise SdtkError(
            f"interrupted at step {training['steps']}; checkpoint {training['checkpoint']}",
            hint="continue with the same command and --resume",
        )
    overlay = write_overlay(rpath, rec, out, TRAINABLE[mode], artifact)

    t = time.monotonic()
    progress(f"after: plan's probe of {overlay.name} on the hold-out split")
    after = holdout_metrics(overlay, holdout_file, tokens=opts.eval_tokens, seed=opts.seed, threads=1)
    after["seconds"] = round(time.monotonic() - t, 1)

    result = TrainResult(
        recipe=str(recipe),
        mode=mode,
        out=out,
        artifact=artifact,
        overlay=overlay,
        report_path=out / "train_report.json",
        before=before,
        after=after,
        training=training,
        data={
            "workload": name,
            "prompts": len(prompts),
            "train_prompts": len(train_p),
            "holdout_prompts": len(held_p),
            "holdout_file": str(holdout_file),
            "holdout_fraction": opts.holdout,
            "self_distillation": gen_info,
        },
        extra={"host": host_info(), "seconds_total": round(time.monotonic() - t_start, 1)},
    )
    atomic_write(result.report_path, json.dumps(result.to_dict(), indent=2) + "\n")
    return result


def _target_dir(rec: Any) -> Path:
    """The target's local directory; a hub id is downloaded (whole snapshot) through toolkit.hub."""
    r = hub.resolve(rec.models.target, role="target", recipe=rec, fetch="full")
    if r.path is None or not r.weights:
        raise UsageError(
            f"the target {rec.models.target.describe()} has no local weights: {r.reason or 'not downloaded'}",
            hint="training runs the target on this machine: download it, or point models.target.path at it",
        )
    return Path(r.path)


def _init_distributed() -> int:
    """Join torchrun's process group (NCCL on GPUs, gloo on CPU); this process's rank."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return 0
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        cuda = torch.cuda.is_available()
        if cuda:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend="nccl" if cuda else "gloo")
    return int(dist.get_rank())


def _barrier() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def write_overlay(rpath: Path, rec: Any, out: Path, field_name: str, artifact: Path) -> Path:
    """RECIPE with `models.<field_name>` pointing at the trained artifact, written next to it; the
    recipe's other local paths are rewritten relative to the new file."""
    import yaml

    raw = load_yaml(rpath)
    models = dict(raw.get("models") or {})
    for key in list(models):
        p = rec.local_path(getattr(rec.models, key)) if getattr(rec.models, key, None) is not None else None
        if p is not None:
            models[key] = _rel(p, out)
    models[field_name] = _rel(artifact, out)
    raw["models"] = models
    raw["description"] = f"{raw.get('description') or rpath.stem} + {field_name} trained by sdtk train-draft"
    raw.pop("name", None)
    overlay = out / f"{rpath.stem}-trained.yaml"
    head = (
        f"# Written by `sdtk train-draft {rpath.name}`: {rpath.name} with models.{field_name} replaced by the\n"
        f"# trained {artifact.name}/ (see train_report.json). Compare: sdtk bench --compare {rpath} {overlay}\n"
    )
    atomic_write(overlay, head + yaml.safe_dump(raw, sort_keys=False))
    load_recipe(overlay)  # the overlay must parse: fail here, not at deploy time
    return overlay


def _rel(path: Path, base: Path) -> str:
    """Relative to `base` for what lies inside it (the overlay moves with its head), else absolute."""
    path, base = Path(path).resolve(), Path(base).resolve()
    if path.is_relative_to(base):
        return f"./{path.relative_to(base).as_posix()}"
    return str(path)


def host_info() -> dict[str, Any]:
    import torch

    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = []
    from importlib.metadata import PackageNotFoundError, version

    try:
        mo = version("nvidia-modelopt")
    except PackageNotFoundError:
        mo = None
    return {
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "modelopt": mo,
        "python": platform.python_version(),
        "loadavg_1_5_15": load,
    }


ProgressFn = Callable[[str], None]
