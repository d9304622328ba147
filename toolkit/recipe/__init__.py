"""Recipes: the closed, typed description of one speculative-decoding deployment.

- `toolkit.recipe.schema`: the models (`Recipe` and its parts; `speculative` is the tagged union of
  the modes' recipe classes, each from its home in toolkit/modes/);
- `toolkit.recipe.loader`: hardened YAML loading, `--set` overrides, the bundled recipes, parsing;
- `toolkit.recipe.explain`: pydantic's errors as dotted fields, allowed values and did-you-mean.
- `toolkit.recipe.gguf_source`: how a recipe names a GGUF file, where it is, where its conversion goes.

Every name is importable from `toolkit.recipe` as before the split. Importable without torch,
tritonclient or tensorrt_llm.
"""

from __future__ import annotations

from toolkit.modes.lookahead import lookahead_max_draft_len
from toolkit.recipe.loader import (
    MAX_DEPTH,
    MAX_NODES,
    MAX_RECIPE_BYTES,
    apply_overrides,
    bundled_recipes,
    load_recipe,
    load_yaml,
    load_yaml_text,
    parse_recipe,
    resolve_recipe_path,
)
from toolkit.recipe.schema import (
    BACKENDS,
    DTYPES,
    LLMAPI_MODES,
    MAX_LEN,
    MODE_SOURCES,
    MODES,
    BuildLimits,
    DraftTarget,
    DynamoRouterMode,
    DynamoServing,
    Eagle,
    Eagle3,
    Lookahead,
    Medusa,
    Models,
    ModelSource,
    NGram,
    NoSpeculation,
    Parallel,
    Recipe,
    ReferenceOptions,
    Serving,
    SpecT,
    Speculative,
)
from toolkit.schema import FieldError, clip

__all__ = [
    "BACKENDS",
    "DTYPES",
    "LLMAPI_MODES",
    "MAX_DEPTH",
    "MAX_LEN",
    "MAX_NODES",
    "MAX_RECIPE_BYTES",
    "MODES",
    "MODE_SOURCES",
    "BuildLimits",
    "DraftTarget",
    "DynamoRouterMode",
    "DynamoServing",
    "Eagle",
    "Eagle3",
    "FieldError",
    "Lookahead",
    "Medusa",
    "ModelSource",
    "Models",
    "NGram",
    "NoSpeculation",
    "Parallel",
    "Recipe",
    "ReferenceOptions",
    "Serving",
    "SpecT",
    "Speculative",
    "apply_overrides",
    "bundled_recipes",
    "clip",
    "load_recipe",
    "load_yaml",
    "load_yaml_text",
    "lookahead_max_draft_len",
    "parse_recipe",
    "resolve_recipe_path",
]
