"""A mode's name is spelled out in its home, the toolkit/modes/
package, and in that mode's runtime module (toolkit/reference/<mode>.py) only; everything else asks the registry (ModeInfo attributes) or
uses its constants, so adding or renaming a mode touches one place."""

from __future__ import annotations

import re
import tokenize
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
        assert f'"{name}"' in text or f'"{name}"' in (TOOLKIT / "modes" / f"{name}.py").read_text(
            encoding="utf-8"
        )
    assert set(NAMES) == {
        "draft_target",
        "eagle3",
        "eagle",
        "medusa",
        "lookahead",
        "ngram",
        "sa",
        "pard",
        "mtp",
    }


def test_constants_and_attributes_match_the_registry():
    assert modes.info(modes.DRAFT_TARGET).two_model and not any(
        m.two_model for m in modes.REGISTRY if m.name != modes.DRAFT_TARGET
    )
    assert modes.info(modes.EAGLE3).triton_decoding_mode("engine") == "eagle"
    assert modes.info(modes.EAGLE3).triton_decoding_mode("reference") == modes.EAGLE3
    assert {m.name for m in modes.REGISTRY if m.heads_in_engine} == {modes.MEDUSA, modes.EAGLE}


# --------------------------------------------------------------------------- what a new mode touches

# The mode constants toolkit.modes exports for code that must name a mode ("none" is a plain word).
CONSTANTS = {n.upper() for n in NAMES} | {"MEDUSA_HEAD_MODEL_TYPE"}
# Code outside the mode homes that still names a mode through its constant, and why (a code NAME
# token, not a comment or a string). Each entry is a place a new mode of that kind would have to
# touch; the test below fails on any other, and on an entry that no longer needs its constants.
PENDING_CONSTANTS: dict[str, tuple[set[str], str]] = {
    "toolkit/hub/inspection.py": (
        {"MEDUSA", "EAGLE3", "EAGLE", "MEDUSA_HEAD_MODEL_TYPE"},
        "head kinds: which mode a head checkpoint's config.json is for, and its parameter count",
    ),
    "toolkit/catalogue.py": (
        {"MEDUSA", "EAGLE3", "EAGLE", "MEDUSA_HEAD_MODEL_TYPE"},
        "head kinds of catalogue entries",
    ),
    "toolkit/build/preflight.py": ({"EAGLE3"}, "the shared head-fit check's draft-vocabulary bound"),
    "toolkit/repo/runbook.py": ({"LOOKAHEAD"}, "the runbook's per-request lookahead tensors"),
    "toolkit/train/trainers.py": (
        {"EAGLE3", "MEDUSA", "DRAFT_TARGET", "PARD", "MTP"},
        "the trainer per mode",
    ),
    "toolkit/train/launch.py": ({"EAGLE3"}, "--dry-run sizes EAGLE-3 training only"),
    # A mode's own trainer reading its own ModeInfo (as toolkit/reference/<mode>.py may).
    "toolkit/train/medusa.py": ({"MEDUSA"}, "Medusa's trainer: its ModelOpt mode"),
    "toolkit/train/eagle3.py": ({"EAGLE3"}, "EAGLE-3's trainer: its ModelOpt mode"),
    "toolkit/train/pard.py": ({"PARD"}, "PARD's trainer: the spd_type its checkpoints carry"),
    # The served Triton models' logic (moved from model_repo_templates into the package).
    "toolkit/serving/generator.py": ({"LOOKAHEAD"}, "the per-request lookahead window of a served row"),
    "toolkit/serving/llmapi.py": (
        {"EAGLE3", "NGRAM", "DRAFT_TARGET"},
        "the LLM-API stand-in reads speculative_config's decoding types into the reference spec",
    ),
    "toolkit/serving/reference.py": (
        {"DRAFT_TARGET", "EAGLE3", "MEDUSA", "LOOKAHEAD"},
        "the served reference model: the BLS-driven draft-target engine and per-request choices",
    ),
}


def _constants_named(path: Path) -> set[str]:
    with path.open("rb") as f:
        names = {t.string for t in tokenize.tokenize(f.readline) if t.type == tokenize.NAME}
    return names & CONSTANTS


def test_mode_constants_outside_the_homes_are_only_the_pending_ones():
    """Mode-specific dispatch outside toolkit/modes/ and toolkit/reference/<mode>.py asks the
    registry (ModeInfo facts, hooks, the reference proposers); the places that still name a mode
    by its constant are listed above, each with its reason."""
    found = {}
    for path in sorted(TOOLKIT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("toolkit/modes/") or rel in {f"toolkit/reference/{n}.py" for n in NAMES}:
            continue
        named = _constants_named(path)
        if named:
            found[rel] = named
    assert found == {rel: names for rel, (names, _) in PENDING_CONSTANTS.items()}


def _mentions(path: Path, name: str) -> bool:
    """The file names mode `name` in code: its module or name as an identifier (toolkit.modes.<name>,
    `from toolkit.modes import ... <name>`), its constant, or its quoted name (comments and prose
    in strings aside)."""
    with path.open("rb") as f:
        for t in tokenize.tokenize(f.readline):
            if t.type == tokenize.NAME and t.string in (name, name.upper()):
                return True
            if t.type == tokenize.STRING and t.string.strip("\"'") == name and len(t.string) == len(name) + 2:
                return True
    return False


# Areas outside the guarded package that still re-encode the mode table: the Triton models under
# model_repo_templates/, whose logic is moving into the package (pending: listed, not yet derived).
PENDING_AREAS = {
    # the served reference model's MODES table: Triton decoding modes to recipe modes
    "model_repo_templates/reference/tensorrt_llm/1/model.py",
    # the reference llmapi model's speculative_config decoding types to recipe sections
    "model_repo_templates/reference_llmapi/tensorrt_llm/1/model.py",
}


def test_the_sa_mode_takes_its_home_its_proposer_and_one_registry_entry():
    """The proof that a reference-served mode is one home, one proposer and one registry entry:
    every file under toolkit/ that names SA, and why. SA's enhancer is an option of EAGLE-3
    (`speculative.sa_config`), so EAGLE-3's home and proposer name it as EAGLE-3's own feature."""
    touched = {p.relative_to(ROOT).as_posix() for p in TOOLKIT.rglob("*.py") if _mentions(p, "sa")}
    touched -= {rel for (rel, name) in COINCIDENCES if name == "sa"}
    assert touched == {
        "toolkit/modes/sa.py",  # its home: INFO, SPEC, hooks, the enhancer's config
        "toolkit/reference/sa.py",  # its proposer: the automaton, speculator()
        "toolkit/modes/__init__.py",  # the registry entry
        "toolkit/modes/eagle3.py",  # EAGLE-3's sa_config field (SAEnhancerConfig)
        "toolkit/reference/eagle3.py",  # EAGLE-3's proposer wraps its speculator in SA's enhancer
    }
    registry = (TOOLKIT / "modes" / "__init__.py").read_text(encoding="utf-8")
    assert [line for line in registry.splitlines() if re.search(r"\bsa\b", line)] == [
        "from toolkit.modes import draft_target, eagle, eagle3, lookahead, medusa, mtp, ngram, none, pard, sa",
        "    register(m) for m in (none, draft_target, eagle3, eagle, medusa, lookahead, ngram, sa, pard, mtp)",
    ]
    # Outside the package, the pending areas only.
    outside = {
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "model_repo_templates").rglob("*.py")
        if any(_mentions(p, n) for n in NAMES)
    }
    assert outside <= PENDING_AREAS


def test_a_mode_without_a_reference_proposer_is_refused_by_its_support_not_by_a_table():
    """The reference side of a new mode: a proposer module named like the mode, found by name."""
    from toolkit.reference import proposers

    homes = {p.stem for p in (TOOLKIT / "reference").glob("*.py")} & set(modes.MODES)
    assert homes == {m.name for m in modes.REGISTRY if m.reference.supported}
    assert "sa" in homes and proposers.proposer("sa").__name__ == "toolkit.reference.sa"
