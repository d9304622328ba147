"""`sdtk generate`: one prompt through the reference runtime, as a recipe describes it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from toolkit.errors import GenerationError, ModelError
from toolkit.recipe import ModelSource, Recipe


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() not in ("", "0", "false", "no", "off")


def resolve_model(recipe: Recipe, source: ModelSource, what: str) -> Path:
    """A local directory for `source`: its `path`, or the hub snapshot (downloaded unless HF_HUB_OFFLINE)."""
    local = recipe.local_path(source)
    if local is not None:
        return local
    from huggingface_hub import snapshot_download

    offline = _offline()
    try:
        return Path(snapshot_download(str(source.repo), revision=source.revision, local_files_only=offline))
    except Exception as e:  # huggingface_hub raises many types (HTTP, cache, auth, validation)
        hint = (
            "HF_HUB_OFFLINE is set and the model is not in the local cache; download it once with network access"
            if offline
            else "check the repo id and revision, your network, and HF_TOKEN for gated models"
        )
        raise ModelError(
            f"cannot fetch {what} '{source.describe()}': {e.__class__.__name__}: {e}", hint=hint
        ) from None


def run_generate(
    recipe: Recipe,
    prompt: str,
    max_tokens: int,
    *,
    no_speculation: bool = False,
    temperature: float = 0.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int | None = None,
) -> dict[str, Any]:
    """Generate with the reference runtime; returns text, generated token ids, stats, mode, finish reason."""
    if not prompt:
        raise GenerationError("the prompt is empty", hint="pass some text with --prompt")
    if max_tokens <= 0:
        raise GenerationError(
            f"max tokens must be positive, got {max_tokens}", hint="ask for at least 1 token"
        )
    from toolkit.reference import ReferenceRuntime, SamplingParams

    sampling = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
    models = recipe.models
    spec = recipe.speculative

    def optional(source: ModelSource | None, what: str) -> Path | None:
        return resolve_model(recipe, source, what) if source is not None else None

    runtime = ReferenceRuntime.load(
        target=resolve_model(recipe, models.target, "target"),
        draft=optional(models.draft, "draft"),
        medusa=optional(models.medusa_heads if spec.mode == "medusa" else None, "Medusa heads"),
        eagle3=optional(models.eagle_head if spec.mode == "eagle3" else None, "EAGLE-3 head"),
        spec=spec,
        # The reference runtime always computes in float32, whatever the engine precision.
        dtype="float32",
        tokenizer=optional(models.tokenizer, "tokenizer"),
    )
    tokenizer = runtime.tokenizer
    ids = tokenizer(prompt)["input_ids"]
    result = runtime.generate(ids, max_tokens, sampling=sampling, speculative=not no_speculation)
    return {
        "text": tokenizer.decode(result.token_ids, skip_special_tokens=True),
        "token_ids": result.token_ids,
        "stats": result.stats.to_dict(),
        "mode": "none" if no_speculation else spec.mode,
        "finish_reason": result.finish_reason,
    }
