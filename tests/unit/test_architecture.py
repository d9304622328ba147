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


# No runtime import cycle is left (recipe_check holds `sdtk recipes validate`, which used to
# make compat import build back).
KNOWN_CYCLES: list[set[str]] = []


def _import_graph() -> dict[str, set[str]]:
    """toolkit module → the toolkit modules it imports at run time (lazy imports included,
    `if TYPE_CHECKING:` blocks and imports of its own parent packages excluded)."""
    import ast

    import toolkit

    root = Path(toolkit.__file__).parent
    mods = {}
    for p in root.rglob("*.py"):
        parts = ("toolkit", *p.relative_to(root).with_suffix("").parts)
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        mods[name] = p

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        tree = ast.parse(p.read_text(encoding="utf-8"))
        skip = {
            id(n)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for n in ast.walk(node)
        }
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            for t in names:
                r = resolve(t) if t.startswith("toolkit") else None
                if r and r != m and not m.startswith(r + "."):
                    graph[m].add(r)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_new_runtime_import_cycles():
    graph = _import_graph()
    new = [sorted(c) for c in _cycles(graph) if not any(c <= known for known in KNOWN_CYCLES)]
    assert new == []
    # The cycles this change broke stay broken.
    assert "toolkit.ops.monitor" not in graph["toolkit.ops.spec_metrics"]
    assert "toolkit.build.llmapi" not in graph["toolkit.build.reference"] or (
        "toolkit.build.reference" not in graph["toolkit.build.llmapi"]
    )


def test_the_documented_layers_are_the_import_contract():
    """docs/architecture.md's layer list is pyproject.toml's repo-wide import-linter contract,
    line for line, and the contract names every top-level module (exhaustive)."""
    import tomllib

    import toolkit

    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    contracts = tomllib.loads(pyproject.read_text(encoding="utf-8"))["tool"]["importlinter"]["contracts"]
    (contract,) = [c for c in contracts if c.get("containers") == ["toolkit"] and c["type"] == "layers"]
    assert contract["exhaustive"] is True
    text = DOC.read_text(encoding="utf-8")
    block = re.search(r"<!-- layers:[^>]*-->\n```\n(.*?)\n```", text, re.S)
    assert block is not None
    assert block.group(1).splitlines() == contract["layers"]
    named = {m.strip() for line in contract["layers"] for m in re.split(r"[|:]", line)}
    root = Path(toolkit.__file__).parent
    top = {p.stem for p in root.glob("*.py") if p.stem != "__init__"} | {
        p.name for p in root.iterdir() if (p / "__init__.py").exists()
    }
    assert named == top
