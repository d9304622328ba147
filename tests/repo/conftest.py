"""Fixtures for the model-repository tests: stand-in engine directories, recipes per
backend × mode, a small tokenizer, and sdtk's Python models loaded against a fake
`triton_python_backend_utils`.

The TensorRT-LLM engines and llmapi option directories here are stand-ins: a config.json in the
layout of docs/contracts.md, no weights. Rendering reads nothing else from them.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from toolkit import modes
from toolkit.build.context import SPEC_MODE_NAMES
from toolkit.recipe import Recipe, parse_recipe
from toolkit.repo.templates import SERVING_PACKAGE
from toolkit.resources import serving_dir, templates_dir

from . import fake_pb_utils

# What the compat matrix allows, per backend.
COMBOS = {
    "engine": ["none", "draft_target", "medusa", "eagle", "lookahead"],
    "llmapi": ["none", "draft_target", "eagle3", "ngram"],
    "reference": ["none", "draft_target", "eagle3", "medusa", "lookahead", "ngram"],
}
ALL = [(b, m) for b, modes in COMBOS.items() for m in modes]
_SPECS: dict[str, dict[str, Any]] = {
    "none": {"mode": "none"},
    "draft_target": {"mode": "draft_target", "max_draft_len": 5},
    "medusa": {"mode": "medusa", "medusa_choices": [[0], [0, 0], [1], [0, 1]], "num_medusa_heads": 2},
    "eagle": {"mode": "eagle", "eagle_choices": [[0], [1], [0, 0], [0, 1]]},
    "eagle3": {"mode": "eagle3", "max_draft_len": 3},
    "lookahead": {"mode": "lookahead", "window": 5, "ngram": 3, "verification_set": 4},
    "ngram": {"mode": "ngram", "max_draft_len": 4, "max_matching_ngram_size": 3},
    "pard": {"mode": "pard", "max_draft_len": 4},
    "mtp": {"mode": "mtp", "max_draft_len": 2},
}
_SOURCES = {
    "draft_target": "draft",
    "medusa": "medusa_heads",
    "eagle": "eagle_head",
    "eagle3": "eagle_head",
    "pard": "draft",
}


def make_recipe(backend: str, mode: str, **sections: Any) -> Recipe:
    """A valid recipe for (backend, mode); `sections` update top-level recipe sections
    (`speculative` is replaced whole)."""
    models: dict[str, Any] = {"target": {"path": "/models/target"}}
    if mode in _SOURCES:
        models[_SOURCES[mode]] = {"path": f"/models/{_SOURCES[mode]}"}
    data: dict[str, Any] = {
        "name": f"test-{backend}-{mode}".replace("_", "-"),
        "backend": backend,
        "models": models,
        "speculative": dict(_SPECS[mode]),
        "build": {"max_batch_size": 6},
    }
    if backend in ("engine", "reference") and mode == "draft_target":  # the twin renders the GPU repository
        data["serving"] = {"decoupled": False}
    for key, value in sections.items():
        if key != "speculative" and isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return parse_recipe(data)


def write_engine(
    path: Path,
    recipe: Recipe,
    backend: str,
    role: str = "target",
    *,
    max_batch_size: int = 6,
    max_draft_len: int | None = None,
    spec_mode: str | None | bool = True,
    dtype: str = "float16",
    tp: int = 1,
) -> Path:
    """A stand-in engine directory: config.json only (contracts.md layout)."""
    path.mkdir(parents=True, exist_ok=True)
    target = role == "target"
    if spec_mode is True:
        spec_mode = SPEC_MODE_NAMES[recipe.mode] if target else None
    cfg: dict[str, Any] = {
        "version": "1.1.0" if backend != "reference" else "sdtk-reference-0.1.0",
        "pretrained_config": {
            "architecture": "LlamaForCausalLM",
            "dtype": dtype,
            "mapping": {"world_size": tp, "tp_size": tp, "pp_size": 1},
        },
        "build_config": {
            "max_input_len": 1024,
            "max_seq_len": 2048,
            "max_batch_size": max_batch_size,
            "max_num_tokens": 8192,
            "max_draft_len": (recipe.speculative.draft_len if target else 0)
            if max_draft_len is None
            else max_draft_len,
            "speculative_decoding_mode": spec_mode,
            "plugin_config": {},
        },
    }
    if backend == "reference":
        # sdtk's reference build states the draft length once, in `speculative` (toolkit.build.configs).
        if max_draft_len is None:
            del cfg["build_config"]["max_draft_len"]
        cfg["reference"] = {
            "role": role,
            "checkpoint": f"/models/{role}",
            "tokenizer": "/models/tokenizer",
            "draft": None,
            "medusa_heads": None,
            "eagle_head": None,
            "speculative": recipe.speculative.model_dump(mode="json"),
        }
    (path / "config.json").write_text(json.dumps(cfg, indent=2))
    return path


def llmapi_options(recipe: Recipe) -> dict[str, Any]:
    opts: dict[str, Any] = {
        "max_batch_size": recipe.build.max_batch_size,
        "max_seq_len": recipe.build.max_seq_len,
    }
    if recipe.mode != "none":
        spec: dict[str, Any] = {
            "decoding_type": modes.info(recipe.mode).llmapi_types[0],  # the registry's first spelling
            "max_draft_len": recipe.speculative.draft_len,
        }
        if recipe.mode == "draft_target":
            spec["speculative_model_dir"] = "/models/draft"
        opts["speculative_config"] = spec
    return opts


def engines_for(tmp: Path, recipe: Recipe, backend: str, **kwargs: Any) -> dict[str, Path]:
    engines = {"target": write_engine(tmp / "engines" / "target", recipe, backend, **kwargs)}
    if recipe.mode == "draft_target" and backend != "llmapi":
        engines["draft"] = write_engine(tmp / "engines" / "draft", recipe, backend, "draft")
    return engines


@pytest.fixture
def render(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Any]:
    """render(backend, mode, **recipe_sections) → RenderResult, in a fresh directory;
    `templates=root` renders from another template root (for that call only)."""
    from toolkit.repo import render as render_module
    from toolkit.repo import render_repository

    count = [0]

    def run(
        backend: str, mode: str, *, recipe: Recipe | None = None, out: Path | None = None, **kw: Any
    ) -> Any:
        count[0] += 1
        root = tmp_path / f"r{count[0]}"
        recipe = recipe or make_recipe(backend, mode, **kw.pop("sections", {}))
        engines = kw.pop("engines", None) or engines_for(root, recipe, backend)
        options = kw.pop("llmapi_options", llmapi_options(recipe) if backend == "llmapi" else None)
        templates = kw.pop("templates", None)
        with monkeypatch.context() as m:
            if templates is not None:
                m.setattr(render_module, "templates_dir", lambda: Path(templates).absolute())
            return render_repository(
                recipe,
                engines,
                out or root / "repo",
                backend=backend,
                llmapi_options=options,
                tokenizer_dir=kw.pop("tokenizer_dir", "/models/tokenizer"),
                **kw,
            )

    return run


# --------------------------------------------------------------------------- Python models


@pytest.fixture
def pb(monkeypatch) -> Any:
    """The fake triton_python_backend_utils, installed for the duration of a test, and a fresh
    import of toolkit/serving under the name the rendered model.py files import it by
    (`sdtk_serving`: the renderer copies the package next to each of them)."""
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", fake_pb_utils)
    for name in [m for m in sys.modules if m == SERVING_PACKAGE or m.startswith(SERVING_PACKAGE + ".")]:
        monkeypatch.delitem(sys.modules, name)
    spec = importlib.util.spec_from_file_location(
        SERVING_PACKAGE, serving_dir() / "__init__.py", submodule_search_locations=[str(serving_dir())]
    )
    assert spec and spec.loader
    package = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, SERVING_PACKAGE, package)
    spec.loader.exec_module(package)
    fake_pb_utils.MODELS.clear()
    fake_pb_utils.CALLS.clear()
    return fake_pb_utils


@pytest.fixture
def load_model(pb: Any) -> Callable[[str], Any]:
    """load_model("inflight_batcher_llm/preprocessing/1/model.py") → the module of the model's
    logic (the sdtk_serving module its adapter's TritonPythonModel subclasses a class of), with
    `TritonPythonModel` set to the adapter's class; a model.py that holds its logic itself: that
    module."""

    def load(rel: str) -> Any:
        path = templates_dir() / rel
        name = "sdtk_test_" + rel.replace("/", "_").removesuffix(".py")
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        base = module.TritonPythonModel.__mro__[1]
        if not base.__module__.startswith(SERVING_PACKAGE + "."):
            return module
        logic = sys.modules[base.__module__]
        logic.TritonPythonModel = module.TritonPythonModel
        return logic

    return load


CORPUS = [
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    "Speculative decoding proposes tokens that the target model verifies.",
    "The quick brown fox jumps over the lazy dog. Hello world!",
    "import numpy as np\nprint(np.arange(10))\n",
] * 4


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory) -> Path:
    """A small byte-level BPE tokenizer (<s>=0, </s>=1, <pad>=2; BOS added), saved like HF's."""
    pytest.importorskip("transformers")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    out = tmp_path_factory.mktemp("tokenizer")
    fast.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tokenizer(tokenizer_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tokenizer_dir)
