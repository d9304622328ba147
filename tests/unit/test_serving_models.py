"""The Triton Python models are thin adapters over toolkit/serving, and that package stays
self-contained where it must: what the engine repository's models import runs in NVIDIA's
container, which has numpy and triton_python_backend_utils but not sdtk."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "model_repo_templates"
SERVING = ROOT / "toolkit" / "serving"
# The modules the engine repository's Python models (preprocessing, postprocessing, BLS) import.
SELF_CONTAINED = ("__init__", "triton", "preprocessing", "postprocessing", "bls")
ALLOWED = {"numpy", "triton_python_backend_utils", "transformers"}


def _functions(tree: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _length(node: ast.AST) -> int:
    return (node.end_lineno or node.lineno) - node.lineno + 1


def test_sdtk_model_files_are_thin_adapters():
    """Every sdtk model.py (the llmapi layout's model.py is NVIDIA's, copied from TensorRT-LLM)
    holds its TritonPythonModel, imports only sdtk_serving, and no function over 40 lines."""
    models = sorted(TEMPLATES.rglob("model.py"))
    assert len(models) >= 5
    for path in models:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        classes = [n.name for n in tree.body if isinstance(n, ast.ClassDef)]
        assert "TritonPythonModel" in classes, path
        long = [(f.name, _length(f)) for f in _functions(tree) if _length(f) > 40]
        assert long == [], (path, long)


def test_thin_adapters_import_their_logic_from_sdtk_serving():
    thin = [p for p in sorted(TEMPLATES.rglob("model.py")) if len(p.read_text().splitlines()) < 40]
    assert len(thin) >= 3
    for path in thin:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert imported and all(m and m.startswith("sdtk_serving.") for m in imported), (path, imported)


def test_the_engine_repository_modules_import_no_sdtk():
    stdlib = set(sys.stdlib_module_names)
    for stem in SELF_CONTAINED:
        tree = ast.parse((SERVING / f"{stem}.py").read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [] if node.level else [(node.module or "").split(".")[0]]
            else:
                continue
            foreign = [n for n in names if n not in stdlib and n not in ALLOWED and n != "__future__"]
            assert foreign == [], (stem, foreign)


def test_serving_modules_keep_the_size_bounds():
    for path in sorted(SERVING.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        assert len(text.splitlines()) <= 700, path
        long = [(f.name, _length(f)) for f in _functions(ast.parse(text)) if _length(f) > 120]
        assert long == [], (path, long)
