"""Loading a recipe: hardened YAML (size, depth, node count, duplicate keys), `--set` overrides,
the bundled recipes, and parsing into the schema with errors that name the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    ValidationError,
)

from toolkit.errors import RecipeError, did_you_mean
from toolkit.recipe.explain import explain
from toolkit.recipe.schema import Recipe
from toolkit.resources import recipes_dir
from toolkit.schema import clip
from toolkit.shellsafe import has_control

# Loading limits: a recipe is a few dozen values; these stop hostile files (billion laughs, deep
# nesting, huge files) in milliseconds, long before they cost memory.
MAX_RECIPE_BYTES = 1 << 20
MAX_DEPTH = 32
MAX_NODES = 20_000  # values after YAML alias expansion

# --------------------------------------------------------------------------- loading


# libyaml when PyYAML has it: the pure-Python scanner is quadratic on deep flow nesting.
_SafeBase: Any = yaml.CSafeLoader if getattr(yaml, "__with_libyaml__", False) else yaml.SafeLoader


class _UniqueKeyLoader(_SafeBase):
    """PyYAML silently keeps the last of duplicate keys; a recipe must not."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, Any] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if isinstance(key, (dict, list, set)):  # `{}: x` or `[a]: x`: YAML allows it, a recipe does not
            raise yaml.constructor.ConstructorError(
                None, None, f"a key must be a plain name, not a {type(key).__name__}", key_node.start_mark
            )
        if key in seen:
            mark = key_node.start_mark
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key '{key}' (first at line {seen[key].line + 1})", mark
            )
        seen[key] = key_node.start_mark
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _where(frames: list[dict]) -> str:
    """The dotted location of the node being read (`speculative.eagle_choices[3][0]`)."""
    out = ""
    for f in frames:
        if f["seq"]:
            out += f"[{f['index']}]"
        elif f["key"] is not None:
            out += ("." if out else "") + clip(f["key"], 40)
    return clip(out or "<top>", 120)


def _check_shape(text: str, *, path: Path | None, origin: str = "") -> None:
    """Refuse, from the event stream alone (nothing is built), nesting deeper than MAX_DEPTH and
    more than MAX_NODES values after alias expansion (billion laughs)."""

    def fail(ev: Any, what: str, field: str) -> RecipeError:
        return fail_at(ev.start_mark, what, field)

    def fail_at(m: Any, what: str, field: str) -> RecipeError:
        return RecipeError(
            f"invalid YAML{origin}: line {m.line + 1}, column {m.column + 1} (in {field}): {what}",
            path=path,
            field=field,
            hint="a recipe is a few levels of plain keys and values (no deep nesting, no alias bombs)",
        )

    frames: list[dict] = []
    sizes: dict[str, int] = {}
    total = 0

    def placed() -> None:  # a node finished inside the top frame
        if frames:
            f = frames[-1]
            if f["seq"]:
                f["index"] += 1
            else:
                f["want_key"] = not f["want_key"]

    events = yaml.parse(text, Loader=_SafeBase)
    while True:
        try:
            ev = next(events)
        except StopIteration:
            return
        except yaml.MarkedYAMLError as e:
            # libyaml stops at 1000 levels itself, scanning ahead of the events seen here.
            if "nesting depth" in str(e.problem) and e.problem_mark is not None:
                raise fail_at(
                    e.problem_mark, f"nested deeper than {MAX_DEPTH} levels", _where(frames)
                ) from None
            raise
        if isinstance(ev, (yaml.ScalarEvent, yaml.AliasEvent, yaml.CollectionStartEvent)):
            if frames and not frames[-1]["seq"] and frames[-1]["want_key"]:
                frames[-1]["key"] = ev.value if isinstance(ev, yaml.ScalarEvent) else "?"
            grow = sizes.get(ev.anchor or "", 1) if isinstance(ev, yaml.AliasEvent) else 1
            total += grow
            if total > MAX_NODES:
                what = (
                    f"alias *{clip(ev.anchor, 40)} expands the recipe beyond {MAX_NODES} values"
                    if isinstance(ev, yaml.AliasEvent)
                    else f"the recipe holds more than {MAX_NODES} values"
                )
                raise fail(ev, what, _where(frames))
        if isinstance(ev, yaml.CollectionStartEvent):
            frames.append(
                {"seq": isinstance(ev, yaml.SequenceStartEvent), "index": 0, "key": None, "want_key": True,
                 "anchor": ev.anchor, "start": total - 1}
            )  # fmt: skip
            if len(frames) > MAX_DEPTH:
                raise fail(ev, f"nested deeper than {MAX_DEPTH} levels", _where(frames[:-1]))
        elif isinstance(ev, yaml.CollectionEndEvent):
            f = frames.pop()
            if f["anchor"]:
                sizes[f["anchor"]] = total - f["start"]
            placed()
        elif isinstance(ev, (yaml.ScalarEvent, yaml.AliasEvent)):
            if isinstance(ev, yaml.ScalarEvent) and ev.anchor:
                sizes[ev.anchor] = 1
            placed()


def _yaml_error(e: yaml.YAMLError, path: Path | None, origin: str = "") -> RecipeError:
    mark = getattr(e, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    return RecipeError(f"invalid YAML{origin}: {where}{clip(problem, 200)}", path=path)


def load_yaml_text(text: str, *, path: Path | None = None, origin: str = "") -> Any:
    """YAML → Python with sdtk's limits: size, depth, alias expansion, duplicate keys."""
    if len(text) > MAX_RECIPE_BYTES:
        raise RecipeError(
            f"{origin.strip(' ()') or 'the recipe'} is {len(text)} characters; recipes are limited to "
            f"{MAX_RECIPE_BYTES} (1 MiB)",
            path=path,
        )
    try:
        _check_shape(text, path=path, origin=origin)
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as e:
        raise _yaml_error(e, path, origin) from None
    except RecursionError:  # the limits above make this unreachable; keep it a clear error anyway
        raise RecipeError(f"invalid YAML{origin}: nested too deeply", path=path) from None


def load_yaml(path: Path) -> dict[str, Any]:
    try:
        if path.is_file() and path.stat().st_size > MAX_RECIPE_BYTES:
            raise RecipeError(
                f"the recipe is {path.stat().st_size} bytes; recipes are limited to {MAX_RECIPE_BYTES} (1 MiB)",
                path=path,
            )
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RecipeError(
            "no such recipe file", path=path, hint="check the path, or run `sdtk recipes list`"
        ) from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as e:
        raise RecipeError(f"cannot read recipe: {e.__class__.__name__}", path=path) from None
    data = load_yaml_text(text, path=path)
    if data is None:
        raise RecipeError("the recipe is empty", path=path, hint="a recipe needs at least `models.target`")
    if not isinstance(data, dict):
        raise RecipeError(
            f"the top level must be a mapping of fields, not a {type(data).__name__}",
            path=path,
            hint="start the file with keys such as `models:` and `speculative:`",
        )
    return data


def apply_overrides(data: dict[str, Any], overrides: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """Apply `a.b=c` overrides in place; values parse as YAML scalars (`4` → int, `true` → bool)."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key or any(not part for part in key.split(".")):
            raise RecipeError(f"--set '{clip(item)}' is not of the form a.b=value", field=clip(key or item))
        if len(raw) > MAX_RECIPE_BYTES:
            raise RecipeError(
                f"--set {clip(key, 60)}: the value is longer than {MAX_RECIPE_BYTES}", field=key
            )
        try:
            if raw.strip():
                _check_shape(raw, path=None, origin=f" (--set {clip(key, 60)})")  # limits stay errors
            value = yaml.load(raw, Loader=_UniqueKeyLoader) if raw.strip() else None  # noqa: S506
        except yaml.YAMLError:
            value = raw  # not YAML: the plain string
        parts = key.split(".")
        node = data
        for i, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            elif not isinstance(child, dict):
                where = ".".join(parts[: i + 1])
                raise RecipeError(f"--set {key}: '{where}' is a value, not a section", field=where)
            node = child
        node[parts[-1]] = value
    return data


def bundled_recipes() -> dict[str, Path]:
    d = recipes_dir()
    return {p.stem: p for p in sorted(d.glob("*.yaml"))} if d.is_dir() else {}


def resolve_recipe_path(ref: str | Path) -> Path:
    """A recipe file path, or the name of a bundled recipe (`tiny-eagle3`)."""
    p = Path(ref)
    if p.exists() or p.suffix in (".yaml", ".yml") or len(p.parts) > 1:
        return p
    bundled = bundled_recipes()
    if str(ref) in bundled:
        return bundled[str(ref)]
    guess = did_you_mean(str(ref), bundled)
    raise RecipeError(
        f"no recipe file or bundled recipe named '{clip(str(ref))}'"
        + (f"; did you mean '{guess}'?" if guess else ""),
        hint="`sdtk recipes list` shows the bundled recipes",
    )


def load_recipe(ref: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Recipe:
    path = resolve_recipe_path(ref)
    data = apply_overrides(load_yaml(path), overrides)
    return parse_recipe(data, path=path)


def parse_recipe(data: dict[str, Any], *, path: Path | None = None) -> Recipe:
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as e:
        # Unknown keys first: a typo'd key also shows up as a missing required field.
        errors = sorted(e.errors(), key=lambda err: err.get("type") != "extra_forbidden")
        problems = [explain(err) for err in errors]
        first_field, first_msg = problems[0]
        line = f"{first_field}: {first_msg}" if first_field else first_msg
        if len(problems) > 1:
            more = [f or "<top>" for f, _ in problems[1:6]] + (["…"] if len(problems) > 6 else [])
            line += f" (and {len(problems) - 1} more: " + ", ".join(more) + ")"
        raise RecipeError(line, path=path, field=first_field, problems=problems) from None
    recipe._source = Path(path).resolve() if path else None
    if recipe.name is None and recipe._source is not None and has_control(recipe._source.stem):
        raise RecipeError(
            f"the file name '{clip(recipe._source.stem)}' contains a control character and would name "
            "the deployment",
            path=None,
            field="name",
            hint="rename the file, or set `name:` in the recipe",
        )
    return recipe
