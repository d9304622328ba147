"""Triton model repositories: render `model_repo_templates/` for a recipe and its built engines.

    from toolkit.repo import render_repository
    result = render_repository(recipe, {"target": dir}, out_dir, backend="reference")
    result.entry_model  # the model clients call

Importing this package is cheap (jinja2, protobuf and tritonclient load when rendering).
"""

from toolkit.repo.engines import EngineInfo, read_engine
from toolkit.repo.errors import RenderError
from toolkit.repo.render import MANIFEST, RUNBOOK, RenderResult, entry_point, render_repository

__all__ = [
    "MANIFEST",
    "RUNBOOK",
    "EngineInfo",
    "RenderError",
    "RenderResult",
    "entry_point",
    "read_engine",
    "render_repository",
]
