"""bench's structure stays as documented: every module sits in a layer of the import-linter
contract (pyproject.toml; `lint-imports` in scripts/test.sh checks the imports themselves), and
bench names no speculative mode, deriving what it needs from toolkit.modes."""

from __future__ import annotations

from pathlib import Path

import tomllib

from toolkit.bench import proposers
from toolkit.modes import REGISTRY

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "toolkit" / "bench"


def _contracts() -> list[dict]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def test_every_bench_module_is_in_a_layer():
    layers = next(c for c in _contracts() if c["name"].startswith("toolkit.bench layers"))["layers"]
    named = {m.strip() for entry in layers for m in entry.split("|")}
    here = {
        f"toolkit.bench.{p.stem if p.is_file() else p.name}"
        for p in BENCH.iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()
    }
    assert here == named
    decide = next(c for c in _contracts() if c.get("containers") == ["toolkit.bench.decide"])["layers"]
    in_decide = {m.strip() for entry in decide for m in entry.split("|")}
    assert in_decide == {p.stem for p in (BENCH / "decide").glob("*.py") if p.stem != "__init__"}


def test_proposer_facts_follow_the_registry():
    by = {m.name: m for m in REGISTRY}
    assert tuple(n for n, m in by.items() if m.source == "draft" and m.two_model) == proposers.DRAFT_MODEL_MODES
    assert proposers.DRAFT_MODEL_MODES == ("draft_target",)  # PARD's draft runs inside the target's model
    for name, m in by.items():
        fw = proposers.draft_forwards(name, 5)
        assert proposers.varies_per_step(name) == (m.chain and m.source is None and fw == 0)
        # One pass for Medusa's heads and PARD's parallel draft; γ for MTP's layers (no source: in the target).
        assert fw == {"pard": 1, "mtp": 5}.get(name, 1 if m.source == "medusa_heads" else 5 if m.source else 0)
