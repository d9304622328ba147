"""One home per mode. A mode plug-in (toolkit/modes/<mode>.py) carries its ModeInfo,
its recipe class and every hook; registration refuses one that lacks any; factories raise on an
unknown mode; nothing outside toolkit/modes/ branches on a mode's recipe class; and the DFlash
walkthrough in docs/contributing.md names every file such a mode touches."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest

from toolkit import modes
from toolkit.bench import proposers
from toolkit.errors import CompatError
from toolkit.modes import draft_target, lookahead, ngram
from toolkit.recipe import parse_recipe

ROOT = Path(__file__).resolve().parents[2]
TOOLKIT = ROOT / "toolkit"
DOC = ROOT / "docs" / "contributing.md"


def _plugin(source: types.ModuleType, *, without: str | None = None, **override: object) -> types.ModuleType:
    """A throwaway plug-in module with `source`'s INFO, SPEC and hooks, less `without`."""
    m = types.ModuleType("throwaway_mode")
    for attr in ("INFO", "SPEC", *modes.HOOKS):
        if attr != without:
            setattr(m, attr, getattr(source, attr))
    for k, v in override.items():
        setattr(m, k, v)
    return m


@pytest.mark.parametrize("hook", modes.HOOKS)
def test_a_plugin_that_leaves_out_a_hook_fails_at_registration(hook):
    with pytest.raises(TypeError) as e:
        modes.register(_plugin(ngram, without=hook))
    msg = str(e.value)
    assert f"lacks the hook(s) {hook};" in msg and "throwaway_mode" in msg and "'ngram'" in msg


def test_registration_names_a_hook_that_is_not_callable_and_checks_info_and_spec():
    with pytest.raises(TypeError, match=r"lacks the hook\(s\) draft_forwards;"):
        modes.register(_plugin(ngram, draft_forwards=3))
    with pytest.raises(TypeError, match=r"hook preflight takes \(ctx\), not \(ctx, checks\)"):
        modes.register(_plugin(ngram, preflight=lambda ctx: []))
    with pytest.raises(TypeError, match="INFO must be a toolkit.modes.ModeInfo"):
        modes.register(_plugin(ngram, without="INFO"))
    with pytest.raises(TypeError, match="SPEC must be its recipe class"):
        modes.register(_plugin(ngram, SPEC=object))
    # a recipe class whose discriminator is another mode's
    with pytest.raises(TypeError, match=r"SPEC Lookahead.mode must be Literal\['ngram'\]"):
        modes.register(_plugin(ngram, SPEC=lookahead.Lookahead))


def test_a_complete_plugin_registers_and_every_builtin_mode_is_one():
    m = modes.register(_plugin(ngram))
    assert m.name == "ngram" and m.spec is ngram.NGram and m.hooks.draft_forwards(4) == 0
    assert tuple(p.name for p in modes.PLUGINS) == modes.MODES
    for p in modes.PLUGINS:
        assert p.hooks is sys.modules[f"toolkit.modes.{p.name}"]  # its home is toolkit/modes/<mode>.py
        assert p.info is modes.info(p.name) and modes.mode(p.name) is p


def test_factories_raise_on_an_unknown_mode():
    with pytest.raises(CompatError, match="unknown speculative mode 'dflash'") as e:
        modes.mode("dflash")
    assert "draft_target" in (e.value.hint or "")
    with pytest.raises(CompatError):
        modes.hooks("dflash")
    with pytest.raises(CompatError):
        proposers.draft_forwards("dflash", 3)


def test_no_isinstance_on_a_mode_class_outside_the_modes_package():
    """No mode-class dispatch outside the modes package (`git grep 'isinstance(.*(Lookahead|Medusa|Eagle|DraftTarget|NGram)'`)."""
    pattern = re.compile(r"isinstance\(.*(Lookahead|Medusa|Eagle|DraftTarget|NGram)")
    found = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in sorted(TOOLKIT.rglob("*.py"))
        if not p.relative_to(TOOLKIT).as_posix().startswith("modes/")
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]
    assert found == []


def test_the_lookahead_draft_length_has_one_formula():
    """Lookahead.draft_len is the formula; nothing outside the mode's home recomputes it."""
    calls = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in sorted(TOOLKIT.rglob("*.py"))
        if p != TOOLKIT / "modes" / "lookahead.py"
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if "lookahead_max_draft_len(" in line
    ]
    assert calls == []
    spec = parse_recipe({"models": {"target": "a/b"}, "speculative": {"mode": "lookahead"}}).speculative
    assert spec.draft_len == lookahead.lookahead_max_draft_len(4, 3, 4) == 15
    assert [
        c.status.value
        for c in lookahead.preflight(SimpleNamespace(recipe=SimpleNamespace(spec_as=lambda k: spec)), None)
    ] == ["passed"]


def test_hooks_answer_what_callers_used_to_work_out():
    dt = parse_recipe(
        {
            "models": {"target": "a/b", "draft": "c/d"},
            "speculative": {"mode": "draft_target", "max_draft_len": 3, "use_draft_logits": True},
        }
    ).speculative
    assert draft_target.triton_parameters(dt, "engine", modes.BLS_MODEL) == {
        "default_num_draft_tokens": "3",
        "default_use_draft_logits": "True",
    }
    assert (
        draft_target.triton_parameters(dt, "reference", modes.BLS_MODEL)["default_use_draft_logits"]
        == "False"
    )
    assert draft_target.triton_parameters(dt, "engine", modes.LLM_MODEL) == {}
    too_small = draft_target.serving_checks(dt, "engine", 2)
    assert [f.fatal for f in too_small] == [True] and "tensorrtllm_backend#473" in too_small[0].message
    assert [f.fatal for f in draft_target.serving_checks(dt, "reference", None)] == [False]
    cfg = draft_target.llmapi_config(dt, modes.LlmapiCall("DraftTarget", "speculative_model", "/draft"))
    assert cfg == {"decoding_type": "DraftTarget", "max_draft_len": 3, "speculative_model": "/draft"}
    # the cost shape: γ draft-model forwards, one pass of Medusa heads, none for a lookup proposer
    assert [
        proposers.draft_forwards(m, 4)
        for m in ("draft_target", "eagle3", "medusa", "ngram", "lookahead", "none")
    ] == [4, 4, 1, 0, 0, 0]


# --------------------------------------------------------------------------- the DFlash walkthrough


def _doc_section(start: str, end: str) -> str:
    text = DOC.read_text(encoding="utf-8")
    return text.split(f"<!-- {start} -->")[1].split(f"<!-- {end} -->")[0]


def _dflash_source() -> str:
    block = _doc_section("dflash.py:start", "dflash.py:end")
    return block.split("```python\n")[1].split("```")[0]


# The files an llmapi-only mode touches, as docs/contributing.md lists them.
DFLASH_FILES = [
    "toolkit/modes/dflash.py",
    "toolkit/modes/__init__.py",
    "tests/unit/test_modes.py",
    "tests/unit/test_modes_home.py",
    "tests/unit/test_mode_dflash.py",
]


def test_the_doc_names_every_file_an_llmapi_only_mode_touches():
    listed = re.findall(r"^- `([^`]+)`", _doc_section("dflash-files:start", "dflash-files:end"), re.M)
    assert listed == DFLASH_FILES
    text = DOC.read_text(encoding="utf-8")
    assert f"touches {len(DFLASH_FILES)} files, 2 of them code" in text
    new = {"toolkit/modes/dflash.py", "tests/unit/test_mode_dflash.py"}
    assert all((ROOT / f).is_file() for f in DFLASH_FILES if f not in new)
    assert not any((ROOT / f).exists() for f in new)


def test_the_doc_dflash_plugin_registers_and_prices_its_drafting():
    m = types.ModuleType("dflash_from_the_doc")
    exec(compile(_dflash_source(), "docs/contributing.md:dflash.py", "exec"), m.__dict__)  # noqa: S102
    m.DFlash.model_rebuild(_types_namespace=m.__dict__)
    mode = modes.register(m)
    assert mode.name == "dflash" and mode.info.llmapi.supported and not mode.info.engine.supported
    spec = m.DFlash.model_validate({"mode": "dflash", "max_draft_len": 3})
    assert spec.draft_len == 3 and mode.hooks.draft_forwards(spec.draft_len) == 3  # not free
    assert not mode.info.reference.supported and "no DFlash" in mode.info.reference.reason


def test_adding_dflash_takes_its_home_and_one_line_in_the_registry(tmp_path):
    """Copy the package, add the doc's dflash.py and the __init__.py entry, nothing else: the recipe,
    `sdtk compat`, the llmapi plan and bench's cost shape all know the mode."""
    pkg = tmp_path / "toolkit"
    shutil.copytree(TOOLKIT, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    (pkg / "modes" / "dflash.py").write_text(_dflash_source(), encoding="utf-8")
    init = (pkg / "modes" / "__init__.py").read_text(encoding="utf-8")
    # The plug-in import line and the PLUGINS tuple, each with dflash appended (whatever modes they list).
    init = re.sub(r"^(from toolkit\.modes import [a-z0-9_, ]+)$", r"\1, dflash", init, count=1, flags=re.M)
    init = re.sub(r"(register\(m\) for m in \([a-z0-9_, ]+)\)", r"\1, dflash)", init, count=1)
    assert "dflash)" in init.split("PLUGINS: ")[1] and init.count(", dflash") == 2  # the doc's two edits took
    (pkg / "modes" / "__init__.py").write_text(init, encoding="utf-8")
    probe = """
import json
from types import SimpleNamespace
from click.testing import CliRunner
from toolkit import compat, modes
from toolkit.bench import proposers
from toolkit.build.llmapi import llm_args
from toolkit.cli import cli
from toolkit.recipe import parse_recipe
r = parse_recipe({"models": {"target": "a/b"}, "backend": "llmapi", "trtllm_version": "1.3.0",
                  "speculative": {"mode": "dflash", "max_draft_len": 2}})
ctx = SimpleNamespace(recipe=r, version="1.3.0", sources={"target": SimpleNamespace(repo="a/b", revision=None, path=None)})
out = CliRunner().invoke(cli, ["compat", "--mode", "dflash"])
from toolkit.errors import CompatError
from toolkit.reference.proposers import proposer
try:
    proposer("dflash")
    reference = "a proposer"
except CompatError as e:
    reference = str(e)
print(json.dumps({
    "modes": list(modes.MODES), "llmapi_modes": list(modes.LLMAPI_MODES), "draft_len": r.speculative.draft_len,
    "llmapi": compat.cell("dflash", "llmapi").supported, "engine": compat.cell("dflash", "engine").supported,
    "speculative_config": llm_args(ctx)["speculative_config"],
    "draft_forwards": proposers.draft_forwards("dflash", 2), "compat_rc": out.exit_code,
    "reference": reference,
}))
"""
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["modes"][-1] == "dflash" and "dflash" in got["llmapi_modes"] and got["draft_len"] == 2
    assert got["llmapi"] and not got["engine"] and got["compat_rc"] == 0
    assert got["speculative_config"] == {"decoding_type": "DFlash", "max_draft_len": 2}
    assert got["draft_forwards"] == 2
    # The reference runtime asks the registry, which says why it has no proposer for it.
    assert "does not run mode dflash: the reference runtime has no DFlash" in got["reference"]
