"""The Jinja side of rendering: the environment (StrictUndefined, the protobuf-text and YAML
filters), one template rendered with its errors located, and the file records a rendered
repository is assembled from."""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit.repo.errors import RenderError
from toolkit.resources import serving_dir


@dataclass
class RepoFile:
    rel: str
    text: str
    model: str | None
    source: str  # the template or file it came from, for error messages
    scan: bool = True  # False for third-party files copied verbatim


def pbstr(value: Any) -> str:
    """A protobuf text-format string literal."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise TypeError(f"expected a string value for a config.pbtxt parameter, got {value!r}")
    text = str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{text}"'


def pbbool(value: Any) -> str:
    if not isinstance(value, bool):
        raise TypeError(f"expected a boolean, got {value!r}")
    return "true" if value else "false"


def to_yaml(value: Any) -> str:
    import yaml

    return yaml.safe_dump(value, sort_keys=False, default_flow_style=False, width=4096).rstrip("\n")


def environment(root: Path):
    from jinja2 import Environment, FileSystemLoader, StrictUndefined

    env = Environment(
        loader=FileSystemLoader(str(root)),
        undefined=StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters.update(pbstr=pbstr, pbbool=pbbool, yaml=to_yaml)
    return env


def render_template(env, template: str, context: dict[str, Any], *, model: str | None, root: Path) -> str:
    from jinja2 import TemplateError

    try:
        return env.get_template(template).render(**context)
    except (TemplateError, TypeError) as e:
        line = getattr(e, "lineno", None)
        if line is None:  # runtime errors: the template frame in the traceback has the line
            for frame in reversed(traceback.extract_tb(e.__traceback__)):
                if frame.filename.endswith(template):
                    line = frame.lineno
                    break
        raise RenderError(
            f"template error: {e}",
            model=model,
            file=root / template,
            line=line,
            hint="a template and toolkit.repo disagree on a value; this is a bug in sdtk",
        ) from None


def pybool(value: bool) -> str:
    """A boolean parameter value, spelled as upstream's fill commands spell it."""
    return "True" if value else "False"


def static(root: Path, rel: str) -> str:
    return (root / rel).read_text(encoding="utf-8")


SERVING_PACKAGE = "sdtk_serving"  # the name model.py imports toolkit/serving under


def python_model(root: Path, files: list[RepoFile], name: str, model_py: str) -> None:
    """A Python model's code: its model.py (a thin adapter) and, next to it, the package of the
    models' logic (toolkit/serving, as `sdtk_serving`)."""
    files.append(RepoFile(f"{name}/1/model.py", static(root, model_py), name, model_py))
    for module in sorted(serving_dir().glob("*.py")):
        files.append(
            RepoFile(
                f"{name}/1/{SERVING_PACKAGE}/{module.name}",
                module.read_text(encoding="utf-8"),
                name,
                f"toolkit/serving/{module.name}",
            )
        )
