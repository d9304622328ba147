"""`sdtk train-draft`: train an EAGLE-3 head or Medusa heads (ModelOpt) or a distilled draft model
for the user's workload on self-distilled data, export it in the layout `sdtk build` reads, and
measure it before/after on a hold-out split with `sdtk plan`'s code.

    api        the command: train_draft(recipe, TrainOptions) -> TrainResult
    launch     --dry-run: the torchrun command, per-GPU memory and steps per epoch
    evaluate   hold-out acceptance per position, τ, predicted speedup (toolkit.bench.api.plan)
    trainers   one trainer per mode behind the loop: batches, resume fingerprint, export
    eagle3     ModelOpt EAGLE-3: config, init, train step, export (shared with scripts/train_tiny_models.py)
    medusa     ModelOpt Medusa: convert, self-distillation loss, FasterDecoding export (shared too)
    draft      draft-model distillation: forward KL, save_pretrained + tokenizer (shared too)
    loop       the Hugging Face Trainer: AdamW, checkpoints, --resume, budgets, Ctrl-C, rich progress
    data       workload loading, hold-out split, self-distillation with its cache

torch, transformers and modelopt are imported lazily.
"""
