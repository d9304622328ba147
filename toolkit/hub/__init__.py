"""Checkpoints: resolve a recipe's model sources and inspect what they are.

A source is a hub id (with an optional revision) or a local directory. Resolution goes through
`huggingface_hub` and honours, at call time, `HF_HOME` / `HF_HUB_CACHE` (where the cache is),
`HF_HUB_OFFLINE` (cache only) and `HF_TOKEN` (read by huggingface_hub itself: sdtk never reads,
prints, logs or stores it; error texts pass through `runner.redact`).

Inspection reads `config.json` (architecture numbers), the tokenizer files (vocabulary size,
special ids and a fingerprint of the token table) and, for speculative heads, tensor shapes from
safetensors headers. When a checkpoint cannot be resolved, the architecture numbers come from the
bundled catalogue (`toolkit.catalogue`) and every record says which source it used.

Importable without torch, transformers or tensorrt_llm (huggingface_hub is imported lazily).
"""

from toolkit.hub.inspection import (
    ModelFacts,
    TensorInfo,
    TokenizerFacts,
    eagle3_vocab_map,
    estimate_parameters,
    facts_from_catalogue,
    facts_from_config,
    inspect,
    inspect_tokenizer,
    medusa_heads,
    read_int_tensor,
    read_json,
    safetensors_index,
    torch_index,
    tree_fingerprint,
)
from toolkit.hub.resolution import (
    FULL_IGNORE,
    METADATA_PATTERNS,
    WEIGHT_SUFFIXES,
    Fetch,
    HubSettings,
    Resolved,
    has_weights,
    hub_settings,
    resolve,
)

__all__ = [
    "FULL_IGNORE",
    "METADATA_PATTERNS",
    "WEIGHT_SUFFIXES",
    "Fetch",
    "HubSettings",
    "ModelFacts",
    "Resolved",
    "TensorInfo",
    "TokenizerFacts",
    "eagle3_vocab_map",
    "estimate_parameters",
    "facts_from_catalogue",
    "facts_from_config",
    "has_weights",
    "hub_settings",
    "inspect",
    "inspect_tokenizer",
    "medusa_heads",
    "read_int_tensor",
    "read_json",
    "resolve",
    "safetensors_index",
    "torch_index",
    "tree_fingerprint",
]
