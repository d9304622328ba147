"""The engine directory's config.json parts every backend writes (docs/contracts.md):
`pretrained_config` and `build_config`, shared by the reference and llmapi builds."""

from __future__ import annotations

from typing import Any

from toolkit.build.context import SPEC_MODE_NAMES, BuildContext


def pretrained_config(ctx: BuildContext, role: str) -> dict:
    f = ctx.sources[role].facts
    p = ctx.recipe.parallel
    return {
        "architecture": f.architecture,
        "dtype": ctx.dtype,
        "vocab_size": f.vocab_size,
        "hidden_size": f.hidden_size,
        "num_hidden_layers": f.num_hidden_layers,
        "num_attention_heads": f.num_attention_heads,
        "num_key_value_heads": f.num_key_value_heads,
        "max_position_embeddings": f.max_position_embeddings,
        "mapping": {"world_size": p.tp * p.pp, "tp_size": p.tp, "pp_size": p.pp},
        "quantization": {"quant_algo": None, "kv_cache_quant_algo": None},
    }


def build_config(ctx: BuildContext, role: str, *, with_draft_len: bool = True) -> dict:
    """`max_draft_len`: the recipe's draft length (its `draft_len`) under trtllm-build's key, which
    deploy reads (toolkit.repo.engines). `with_draft_len=False` leaves it out: the reference build's
    config.json states the draft length once, in the recipe section its runtime reads
    (`reference.speculative`), where deploy reads it too."""
    lim = ctx.recipe.build
    target = role == "target"
    out: dict[str, Any] = {
        "max_input_len": lim.max_input_len,
        "max_seq_len": lim.max_seq_len,
        "max_batch_size": lim.max_batch_size,
        "max_num_tokens": lim.max_num_tokens,
        "max_draft_len": ctx.recipe.speculative.draft_len if target else 0,
        "speculative_decoding_mode": SPEC_MODE_NAMES[ctx.mode] if target else None,
        "plugin_config": {},
    }
    if not with_draft_len:
        del out["max_draft_len"]
    return out
