"""`sdtk train-draft RECIPE --data WORKLOAD --out DIR`: train the draft for the user's workload, then
measure on a held-out split whether it helped.

1. The workload is split (toolkit.train.data.split); the hold-out prompts are never trained on.
2. The target generates its own responses to the training prompts (self-distillation), cached in
   DIR/data with a hash of their inputs.
3. Before: acceptance per position, τ and the predicted speedup of RECIPE on the hold-out split,
   by `sdtk plan`'s code (toolkit.train.evaluate).
4. Training (toolkit.train.loop) with the mode's ModelOpt trainer: EAGLE-3 (toolkit.train.eagle3).
5. Export in the layout `sdtk build` and the upstream converters read, an overlay recipe
   DIR/<recipe>-trained.yaml that points at it, the same numbers after, and DIR/train_report.json.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit._fs import atomic_write
from toolkit.errors import UsageError
from toolkit.progress import Step, quiet
from toolkit.train import data as data_mod
from toolkit.train.loop import LoopConfig

TRAINABLE = {"eagle3": "eagle_head"}  # mode -> the models field the trained artifact replaces
HEAD_DIRS = {"eagle3": "eagle3"}


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
        return f"sdtk bench --compare {self.recipe} {self.overlay}"

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
    from toolkit.recipe import load_recipe, resolve_recipe_path

    rpath = resolve_recipe_path(recipe)
    rec = load_recipe(rpath)
    mode = rec.speculative.mode
    if mode not in TRAINABLE:
        raise UsageError(
            f"train-draft trains {', '.join(TRAINABLE)} so far; {rpath.name} uses mode {mode}",
            hint="draft-target distillation and Medusa heads are not implemented in train-draft yet",
        )
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
    t = time.monotonic()
    if rank == 0:
        examples, gen_info = data_mod.self_distill(
            train_p, target=target, cache_dir=out / "data", max_new=opts.gen_tokens, generate_with=opts.generate_with
        )
        gen_info["seconds"] = round(time.monotonic() - t, 1)
        progress(
            f"self-distillation: {gen_info['tokens']} tokens "
            + ("(cached)" if gen_info["cached"] else f"in {gen_info['seconds']} s")
        )
        from toolkit.train.evaluate import holdout_metrics

        t = time.monotonic()
        progress(f"before: plan's probe of {rpath.name} on the hold-out split")
        before = holdout_metrics(rpath, holdout_file, tokens=opts.eval_tokens, seed=opts.seed, threads=1)
        before["seconds"] = round(time.monotonic() - t, 1)
    _barrier()
    if rank != 0:
        examples, gen_info = data_mod.self_distill(
            train_p, target=target, cache_dir=out / "data", max_new=opts.gen_tokens, generate_with=opts.generate_with
        )

    artifact = out / HEAD_DIRS[mode]
    training = _train_eagle3(target, examples, opts, artifact, gen_info["input_hash"], rank=rank)
    if rank != 0:
        return None
    if training["stopped"] == "interrupted":
        from toolkit.errors import SdtkError

        raise SdtkError(
            f"interrupted at step {training['steps']}; checkpoint {training['checkpoint']}",
            hint="continue with the same command and --resume",
        )
    overlay = write_overlay(rpath, rec, out, TRAINABLE[mode], artifact)

    from toolkit.train.evaluate import holdout_metrics

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
    from toolkit import hub

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


def _train_eagle3(
    target_dir: Path,
    examples: list[data_mod.Example],
    opts: TrainOptions,
    artifact: Path,
    data_hash: str,
    *,
    rank: int = 0,
) -> dict[str, Any]:
    import torch
    from transformers import LlamaForCausalLM

    from toolkit.train import eagle3, loop

    if opts.threads:
        torch.set_num_threads(opts.threads)
    torch.manual_seed(opts.seed)
    world, _ = loop.dist_world()
    device = torch.device(f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else "cpu")
    model = LlamaForCausalLM.from_pretrained(
        str(target_dir), dtype=torch.float32 if device.type == "cpu" else torch.bfloat16
    )
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    c = model.config
    stream = torch.tensor([t for e in examples for t in e.ids], dtype=torch.long)
    if opts.from_ is not None:
        from_cfg = json.loads((Path(opts.from_) / "config.json").read_text())
        dv = int(from_cfg.get("draft_vocab_size", c.vocab_size))
        layer_ids = list(from_cfg.get("eagle_config", {}).get("eagle_aux_hidden_state_layer_ids") or [])
        layer_ids = layer_ids or eagle3.default_layer_ids(c.num_hidden_layers)
        theta = float(from_cfg.get("rope_theta") or 10000)
    else:
        dv = c.vocab_size // 2 if c.vocab_size <= 64000 else 32000
        layer_ids = eagle3.default_layer_ids(c.num_hidden_layers)
        theta = float(getattr(c, "rope_theta", None) or 10000)
    cfg = eagle3.modelopt_config(c, dv, layer_ids, rope_theta=theta)
    eagle3.convert(model, cfg)
    coverage = None
    if opts.from_ is not None:
        eagle3.init_from_export(model, Path(opts.from_))
        init = f"fine-tuned from {opts.from_}"
    else:
        counts = torch.bincount(stream, minlength=c.vocab_size)
        used, d2t, coverage = eagle3.draft_vocab(
            counts, dv, bos=c.bos_token_id, eos=c.eos_token_id, pad=c.pad_token_id
        )
        eagle3.init_from_target(model, used, d2t)
        init = "from scratch (draft vocab: the most frequent tokens of the self-distilled data)"
    if device.type != "cpu":  # the target stays bf16; the head trains in fp32 under autocast
        model.to(device)
        model.eagle_module.float()
    params = eagle3.freeze_for_training(model)
    model.train()
    seq = min(opts.seq_len, max(8, int(stream.numel()) - 1))

    def step_fn(gen: Any) -> tuple[Any, dict[str, float]]:
        # one global batch of batch_size × world windows from the shared generator; this rank's slice
        starts = torch.randint(0, int(stream.numel()) - seq + 1, (opts.batch_size * world,), generator=gen)
        mine = starts.tolist()[rank * opts.batch_size : (rank + 1) * opts.batch_size]
        x = torch.stack([stream[s : s + seq] for s in mine]).to(device)
        return eagle3.train_step(model, x)

    fp = hashlib.sha256(
        json.dumps(
            [data_hash, str(opts.from_), opts.seed, opts.batch_size, world, seq, opts.lr, dv, layer_ids]
        ).encode()
    ).hexdigest()
    lcfg = LoopConfig(
        max_steps=opts.max_steps,
        lr=opts.lr,
        checkpoint_every=opts.checkpoint_every,
        max_minutes=opts.max_minutes,
        seed=opts.seed,
    )
    res = loop.run(
        "eagle3", params, step_fn, lcfg, opts.out / "checkpoints", resume=opts.resume, progress=opts.progress, fingerprint=fp
    )
    if res.stopped == "interrupted" or rank != 0:
        return res.to_dict()
    written = eagle3.export(model.float().cpu(), artifact)
    return {
        **res.to_dict(),
        "trainer": "ModelOpt mtsp.convert(model, [('eagle', EAGLE3_DEFAULT_CFG['config'] + overrides)]), "
        "its forward and loss (TTT steps, self-logit distillation on the draft vocab); "
        "toolkit.train.loop (AdamW, warm-up + cosine)",
        "init": init,
        "draft_vocab_size": dv,
        "draft_vocab_coverage": round(coverage, 4) if coverage is not None else None,
        "aux_layer_ids": layer_ids,
        "batch": [opts.batch_size, seq],
        "lr": opts.lr,
        "train_tokens": int(stream.numel()),
        "export": "modelopt.torch.export.export_speculative_decoding; layers.0.* -> midlayer.*, float16, d2t int64",
        "export_keys": written["keys"],
    }


def write_overlay(rpath: Path, rec: Any, out: Path, field_name: str, artifact: Path) -> Path:
    """RECIPE with `models.<field_name>` pointing at the trained artifact, written next to it; the
    recipe's other local paths are rewritten relative to the new file."""
    import yaml

    from toolkit.recipe import load_recipe, load_yaml

    raw = load_yaml(rpath)
    models = dict(raw.get("models") or {})
    for key, src in list(models.items()):
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
