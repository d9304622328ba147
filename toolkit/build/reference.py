"""The reference backend "build": engine directories that point at the Hugging Face weights.

The layout mirrors TensorRT-LLM's `Engine.save` (`config.json` with `version`,
`pretrained_config`, `build_config`) plus the `reference` section of docs/contracts.md, so that
`deploy` and `toolkit.reference` read every backend the same way. Paths are absolute.
"""

from __future__ import annotations

import json
from pathlib import Path

from toolkit import __version__, modes
from toolkit.build.configs import build_config, pretrained_config
from toolkit.build.context import BuildContext
from toolkit.build.steps import Step
from toolkit.modes.draft_target import EMBEDDING_FROM_TARGET


def _path(ctx: BuildContext, role: str) -> str | None:
    r = ctx.sources.get(role)
    if r is None:
        return None
    return str(r.path) if r.path is not None else ctx.source_arg(role)


def _provenance(ctx: BuildContext, role: str) -> dict | None:
    r = ctx.sources.get(role)
    return r.provenance.to_dict() if r is not None and r.provenance is not None else None


def _embedding_from(ctx: BuildContext, role: str) -> str | None:
    """The target's checkpoint, for a draft stored without its embedding (EMBEDDING_FROM_TARGET):
    its own model loads the target's embedding and tokenizer; None for any other."""
    r = ctx.sources.get(role)
    cfg = Path(r.path) / "config.json" if role == "draft" and r is not None and r.path is not None else None
    if cfg is None or not cfg.is_file() or not json.loads(cfg.read_text()).get(EMBEDDING_FROM_TARGET):
        return None
    return _path(ctx, "target")


def engine_config(ctx: BuildContext, role: str) -> dict:
    spec = ctx.recipe.speculative.model_dump(mode="json")
    shared = _embedding_from(ctx, role)
    return {
        "version": f"sdtk-reference-{__version__}",
        "pretrained_config": pretrained_config(ctx, role),
        # The draft length once: in `speculative` below (the recipe's section), not in build_config too.
        "build_config": build_config(ctx, role, with_draft_len=False),
        "reference": {
            "role": role,
            "checkpoint": _path(ctx, role),
            "tokenizer": _path(
                ctx, "tokenizer" if "tokenizer" in ctx.sources else "target" if shared else role
            ),
            # A draft stored without its embedding: the target checkpoint whose embedding it takes.
            **({"embedding_from": shared} if shared else {}),
            # The mode sources (toolkit.modes.SOURCES), each loaded by its mode's reference proposer.
            **{source: _path(ctx, source) if role == "target" else None for source in modes.SOURCES},
            # The memory-bound twin: the runtime pads the target's MLP on load (toolkit.membound).
            "inflate": ctx.recipe.reference.inflate if role == "target" else 1,
            # A GGUF source's conversion (file, sha256, quantization): reports print its note.
            "provenance": _provenance(ctx, role),
            "speculative": spec,
        },
    }


def plan(ctx: BuildContext) -> list[Step]:
    llmapi_layout = ctx.recipe.repository_layout("reference") == "llmapi"
    # The LLM-API layout drafts inside one model (as LLM() does): no separate draft directory.
    roles = ["target"] + (["draft"] if modes.info(ctx.mode).two_model and not llmapi_layout else [])
    steps = []
    for role in roles:
        cfg = engine_config(ctx, role)
        files = {}
        if llmapi_layout:
            # The same LLM-API options the llmapi backend writes, for the same model.yaml template.
            from toolkit.build import llmapi

            written = llmapi.files(ctx)
            files[llmapi.EXTRA_OPTIONS] = written[llmapi.EXTRA_OPTIONS]
            cfg["llmapi"] = {
                "model": llmapi.model_ref(ctx),
                "extra_llm_api_options": str(ctx.engines / role / llmapi.EXTRA_OPTIONS),
                "schema": llmapi.schema(ctx).to_dict(),
            }
        files["config.json"] = json.dumps(cfg, indent=2) + "\n"
        inputs = [p for p in (r.path for r in ctx.sources.values()) if p is not None]
        steps.append(
            Step(
                name=f"reference-{role}",
                title=f"write the reference {role} engine directory (config.json → HF weights)"
                + (", LLM-API options" if llmapi_layout else ""),
                dest=ctx.engines / role,
                files=files,
                inputs=inputs,
            )
        )
    return steps
