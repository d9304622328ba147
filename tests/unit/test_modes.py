"""toolkit.modes: the registry every list of modes derives from."""

from __future__ import annotations

import typing

from toolkit import compat, modes, recipe
from toolkit.build.context import SPEC_MODE_NAMES
from toolkit.cli import cli
from toolkit.repo.render import LLMAPI_DECODING_TYPES


def test_recipe_classes_match_the_registry():
    # The recipe's discriminated union has one class per registered mode, with the same literal.
    union = typing.get_args(typing.get_args(recipe.Speculative)[0])
    literals = [typing.get_args(cls.model_fields["mode"].annotation)[0] for cls in union]
    assert sorted(literals) == sorted(modes.MODES)
    assert recipe.MODES is modes.MODES and recipe.MODE_SOURCES is modes.MODE_SOURCES
    assert recipe.LLMAPI_MODES == ("none", "draft_target", "eagle3", "ngram", "sa", "pard", "mtp")


def test_tables_derive_from_the_registry():
    assert SPEC_MODE_NAMES is modes.SPEC_MODE_NAMES
    assert SPEC_MODE_NAMES["draft_target"] == "draft_tokens_external"
    assert SPEC_MODE_NAMES["lookahead"] == "lookahead_decoding"
    assert LLMAPI_DECODING_TYPES == {"draft_target": ("DraftTarget",), "eagle3": ("Eagle3", "Eagle"), "ngram": ("NGram",),
                                     "sa": ("SA",), "pard": ("PARD",), "mtp": ("MTP",)}  # fmt: skip
    assert modes.CHAIN_MODES == ("draft_target", "eagle3", "ngram", "sa", "pard", "mtp")
    from toolkit.bench.decide import plan, tune

    assert plan.CHAIN_MODES is tune.CHAIN_MODES is modes.CHAIN_MODES


def test_compat_cells_derive_from_the_registry():
    for m in modes.REGISTRY:
        for backend in ("engine", "llmapi", "reference"):
            c = compat.cell(m.name, backend)
            assert c.supported == m.support(backend).supported and c.reason == m.support(backend).reason
    assert compat.cell("medusa", "engine").families == ("llama", "qwen2", "mixtral")
    assert compat.cell("eagle3", "llmapi").trtllm_name == "Eagle3"
    assert compat.cell("none", "engine").trtllm_name is None
    # the engine path: deprecated from 1.2 (NVIDIA/TensorRT-LLM PR #11723), gone in the 1.3 line (#15907)
    lookahead = compat.cell("lookahead", "engine")
    assert (compat.cell("ngram", "llmapi").min_version, lookahead.deprecated_from, lookahead.max_version) == (
        "1.0",
        "1.2",
        "1.3",
    )
    assert len(compat.matrix()) == 3 * len(modes.REGISTRY)


def test_cli_mode_choices_are_the_registry():
    compat_cmd = cli.commands["compat"]
    mode_opt = next(p for p in compat_cmd.params if p.name == "mode")
    assert tuple(mode_opt.type.choices) == modes.MODES
