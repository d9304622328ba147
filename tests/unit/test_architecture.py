"""docs/architecture.md stays true: every module it names exists."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


def test_every_module_named_exists():
    names = set(re.findall(r"`(toolkit(?:\.[A-Za-z_][A-Za-z0-9_]*)*)`", DOC.read_text(encoding="utf-8")))
    assert len(names) >= 25
    missing = sorted(n for n in names if importlib.util.find_spec(n) is None)
    assert missing == []


def test_every_top_level_module_is_named():
    import toolkit

    root = Path(toolkit.__file__).parent
    text = DOC.read_text(encoding="utf-8")
    top = {p.stem for p in root.glob("*.py") if p.stem != "__init__"} | {
        p.name for p in root.iterdir() if (p / "__init__.py").exists()
    }
    unnamed = sorted(m for m in top if f"`toolkit.{m}`" not in text and f"`toolkit.{m}." not in text)
    assert unnamed == []
