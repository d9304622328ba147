"""Pydantic's validation errors, translated: the dotted field, the allowed values and a
did-you-mean, for RecipeError's one-line message. (Named `explain`, not `errors`: toolkit.errors is
the error hierarchy; this module only words pydantic's errors.)"""

from __future__ import annotations

import re
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import (
    BaseModel,
)
from pydantic_core import ErrorDetails

from toolkit.errors import did_you_mean
from toolkit.recipe.schema import MAX_LEN, MODES, Recipe
from toolkit.schema import FieldError, clip

# --------------------------------------------------------------------------- error translation


def _unwrap(annotation: Any) -> Any:
    """Strip Optional/Annotated so that we can look at the model type inside."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin is Union or str(origin) == "types.UnionType":
            args = [a for a in get_args(annotation) if a is not type(None)]
            if len(args) == 1:
                annotation = args[0]
            else:
                return tuple(args)
        else:
            return annotation


def _variants(annotation: Any) -> dict[str, type[BaseModel]] | None:
    """Tag → model for a discriminated union on `mode`."""
    inner = _unwrap(annotation)
    if isinstance(inner, tuple) and all(isinstance(a, type) and issubclass(a, BaseModel) for a in inner):
        out = {}
        for model in inner:
            ann = model.model_fields["mode"].annotation
            for tag in get_args(ann):
                out[tag] = model
        return out
    return None


def _walk(loc: tuple) -> tuple[list[str], type[BaseModel] | None]:
    """Turn a pydantic loc into dotted parts (dropping union tags) and the model at the end."""
    parts: list[str] = []
    model: Any = Recipe
    i = 0
    while i < len(loc):
        item = loc[i]
        if isinstance(item, int):
            parts[-1:] = [f"{parts[-1]}[{item}]"] if parts else [f"[{item}]"]
            model = None
            i += 1
            continue
        parts.append(str(item))
        nxt = None
        if isinstance(model, type) and issubclass(model, BaseModel) and item in model.model_fields:
            ann = model.model_fields[item].annotation
            variants = _variants(ann)
            if variants is not None:
                if i + 1 < len(loc) and loc[i + 1] in variants:
                    nxt = variants[loc[i + 1]]
                    i += 1  # the tag is pydantic's, not the user's
            else:
                inner = _unwrap(ann)
                if isinstance(inner, type) and issubclass(inner, BaseModel):
                    nxt = inner
        model = nxt
        i += 1
    return parts, model


_QUOTED = re.compile(r"'([^']*)'")


def explain(err: ErrorDetails) -> tuple[str, str]:
    loc = tuple(err.get("loc", ()))
    kind = err.get("type", "")
    ctx = err.get("ctx") or {}
    if kind == "extra_forbidden":
        parts, parent = _walk(loc[:-1])
        key = clip(str(loc[-1]), 60)
        allowed = sorted(parent.model_fields) if parent else []
        guess = did_you_mean(key, allowed)
        msg = "unknown field"
        if guess:
            msg += f"; did you mean '{guess}'?"
        if allowed:
            msg += " Allowed: " + ", ".join(allowed)
        return ".".join([*parts, key]), msg
    parts, _ = _walk(loc)
    field = ".".join(parts)
    if kind == "union_tag_invalid":
        tag = clip(ctx.get("tag"))
        allowed = _QUOTED.findall(str(ctx.get("expected_tags", ""))) or list(MODES)
        guess = did_you_mean(tag, allowed)
        msg = f"'{tag}' is not a known mode" + (f"; did you mean '{guess}'?" if guess else "")
        return f"{field}.mode", msg + " Allowed: " + ", ".join(allowed)
    if kind == "union_tag_not_found":
        return f"{field}.mode", "is required. Allowed: " + ", ".join(MODES)
    if kind in ("literal_error", "enum"):
        allowed = _QUOTED.findall(str(ctx.get("expected", "")))
        got = clip(err.get("input"))
        guess = did_you_mean(got, allowed)
        msg = f"'{got}' is not allowed" + (f"; did you mean '{guess}'?" if guess else "")
        return field, msg + " Allowed: " + ", ".join(allowed)
    if kind == "missing":
        return field, "is required"
    if kind in ("value_error", "assertion_error"):
        original = ctx.get("error")
        if isinstance(original, FieldError):
            return ".".join(p for p in (field, original.field) if p), str(original)
        return field, str(original) if original else err.get("msg", "")
    if kind == "model_type" or kind == "model_attributes_type":
        return field, f"must be a mapping of fields, not {type(err.get('input')).__name__}"
    if kind == "less_than_equal" and parts and parts[-1] in _BOUND_WHY:
        return field, f"{clip(err.get('input'))} exceeds {ctx.get('le')}: {_BOUND_WHY[parts[-1]]}"
    value = err.get("input")
    return (
        field,
        f"{err.get('msg', 'invalid')} (got {repr(clip(value)) if isinstance(value, str) else clip(value)})",
    )


# Why an upper bound exists, for the message that enforces it.
_BOUND_WHY = {
    name: f"TensorRT-LLM sizes its buffers by this length; sdtk allows at most {MAX_LEN} tokens "
    "(2^20), and the build checks it against the model's max_position_embeddings"
    for name in ("max_input_len", "max_seq_len", "max_num_tokens")
}
