"""`sdtk generate`: one prompt through the reference runtime, as a recipe describes it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from toolkit import modes
from toolkit.errors import GenerationError, ModelError
from toolkit.recipe import ModelSource, Recipe


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() not in ("", "0", "false", "no", "off")


def resolve_model(recipe: Recipe, source: ModelSource, what: str) -> Path:
    """A local directory for `source`: its `path`, a GGUF file's conversion (made now unless the
    cache holds it: toolkit.hub.gguf), or the hub snapshot (downloaded unless HF_HUB_OFFLINE)."""
    if source.gguf is not None:
        from toolkit.hub import gguf

        return gguf.ensure_converted(source.gguf, recipe.base_dir, say=_say)
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


def _say(message: str) -> None:
    from toolkit.progress import steps

    steps("generate")(message)


# Loaded runtimes by (model paths, speculative section): validation and benchmarks call
# run_generate repeatedly for the same recipe, and loading costs seconds.
_RUNTIMES: dict[tuple, Any] = {}
THREADS_ENV = "SDTK_REFERENCE_THREADS"


def reference_threads() -> int:
    """The torch threads a reference model instance runs on: one (batch-1 forwards of small
    models run fastest on one thread, 15x under load on 2 cores), or SDTK_REFERENCE_THREADS
    for bigger models."""
    import os

    return max(1, int(os.environ.get(THREADS_ENV, "1") or 1))


def set_torch_threads() -> None:
    """Run this process's torch on reference_threads()."""
    import torch

    torch.set_num_threads(reference_threads())


def reference_dtype(recipe: Recipe) -> str:
    """What the reference runtime computes in for this recipe: its `dtype`, float32 for `auto`
    (the build writes the same into the engine directory)."""
    return "float32" if recipe.dtype == "auto" else recipe.dtype


def _runtime(recipe: Recipe, dtype: str | None = None) -> Any:
    """The recipe's reference runtime in `dtype` (None: reference_dtype(recipe))."""
    from toolkit.reference import ReferenceRuntime

    models, spec = recipe.models, recipe.speculative

    def optional(source: ModelSource | None, what: str) -> Path | None:
        return resolve_model(recipe, source, what) if source is not None else None

    target = resolve_model(recipe, models.target, "target")
    # The mode's own source (the recipe refuses the others).
    need = modes.info(spec.mode).source
    weights = {s: optional(getattr(models, s), f"models.{s}") for s in modes.SOURCES if s == need}
    paths = dict(target=target, **weights, tokenizer=optional(models.tokenizer, "tokenizer"))
    inflate = recipe.reference.inflate
    dtype = dtype or reference_dtype(recipe)
    models_key = tuple(sorted((k, str(v)) for k, v in paths.items()))
    key = (models_key, spec.model_dump_json(), inflate, dtype)
    if key not in _RUNTIMES:
        try:
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()  # "Loading weights" bars would clutter stderr
        except ImportError:
            pass
        set_torch_threads()
        # Keep one model family in memory, in up to two dtypes (validate's gate scores a bf16
        # deployment's divergences with the float32 target).
        for old in [k for k in _RUNTIMES if k[:3] != key[:3]]:
            del _RUNTIMES[old]
        _RUNTIMES[key] = ReferenceRuntime.load(
            target,
            weights,
            tokenizer=paths["tokenizer"],
            spec=spec,
            dtype=dtype,
            inflate=inflate,
        )
    return _RUNTIMES[key]


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
    from toolkit.reference import SamplingParams

    sampling = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
    spec = recipe.speculative
    runtime = _runtime(recipe)
    tokenizer = runtime.tokenizer
    ids = tokenizer(prompt)["input_ids"]
    from toolkit.reference import PLAIN

    result = runtime.generate(ids, max_tokens, sampling=sampling, spec=PLAIN if no_speculation else None)
    return {
        "text": tokenizer.decode(result.token_ids, skip_special_tokens=True),
        "token_ids": result.token_ids,
        "stats": result.stats.to_dict(),
        "mode": "none" if no_speculation else spec.mode,
        "finish_reason": result.finish_reason,
    }
