"""A mode's name is spelled out in its home, the toolkit/modes/
package, and in that mode's runtime module (toolkit/reference/<mode>.py) only; everything else asks the registry (ModeInfo attributes) or
uses its constants, so adding or renaming a mode touches one place."""

from __future__ import annotations

import re
from pathlib import Path

from toolkit import modes

ROOT = Path(__file__).resolve().parents[2]
TOOLKIT = ROOT / "toolkit"
NAMES = [m for m in modes.MODES if m != modes.NONE]  # "none" is also a plain word (fetch levels ...)
# Quoted strings that spell a mode's name by coincidence: (file, name) -> why.
COINCIDENCES = {("toolkit/bench/measure/workloads.py", "sa"): "a syllable of the synthetic prompts"}


def test_a_mode_name_lives_in_modes_and_its_runtime_only():
    pattern = re.compile(r"[\"'](" + "|".join(map(re.escape, NAMES)) + r")[\"']")
    found = []
    for path in sorted(TOOLKIT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for name in pattern.findall(line):
                if rel.startswith("toolkit/modes/") or rel == f"toolkit/reference/{name}.py":
                    continue
                if (rel, name) in COINCIDENCES:
                    continue
                found.append(f"{rel}:{n}: {line.strip()}")
    assert found == []


def test_the_search_sees_what_it_should():
    """The check above is not vacuous: toolkit/modes/core.py or the mode's home spells every name,
    and the mode list is complete."""
    text = (TOOLKIT / "modes" / "core.py").read_text(encoding="utf-8")
    for name in NAMES:
        assert f'"{name}"' in text or f'"{name}"' in (TOOLKIT / "modes" / f"{name}.py").read_text(encoding="utf-8")
    assert set(NAMES) == {"draft_target", "eagle3", "eagle", "medusa", "lookahead", "ngram", "sa", "pard", "mtp"}


def test_constants_and_attributes_match_the_registry():
    assert modes.info(modes.DRAFT_TARGET).two_model and not any(
        m.two_model for m in modes.REGISTRY if m.name != modes.DRAFT_TARGET
    )
    assert modes.info(modes.EAGLE3).triton_decoding_mode("engine") == "eagle"
    assert modes.info(modes.EAGLE3).triton_decoding_mode("reference") == modes.EAGLE3
    assert {m.name for m in modes.REGISTRY if m.heads_in_engine} == {modes.MEDUSA, modes.EAGLE}
