"""Where the shipped data folders live: inside the wheel, or at the top of a source checkout."""

from __future__ import annotations

from functools import cache
from pathlib import Path

_PKG = Path(__file__).resolve().parent


@cache
def data_dir(name: str) -> Path:
    """`recipes`, `model_repo_templates` or `models`.

    A wheel carries them under `toolkit/_data/` (see pyproject's force-include); an
    editable install or a checkout has them next to the package.
    """
    for candidate in (_PKG / "_data" / name, _PKG.parent / name):
        if candidate.is_dir():
            return candidate
    return _PKG.parent / name


def recipes_dir() -> Path:
    return data_dir("recipes")


def templates_dir() -> Path:
    return data_dir("model_repo_templates")


def serving_dir() -> Path:
    """toolkit/serving: the Triton Python models' logic, which every rendered repository carries
    (as the package `sdtk_serving` next to each sdtk model.py)."""
    return _PKG / "serving"
