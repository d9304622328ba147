"""`sdtk recipes validate`: check one recipe file without touching the machine (schema, the
compat cell, and, when every model source is local, the build's offline preflight).

Kept out of `toolkit.compat` so that compat (imported by build) does not import build back."""

from __future__ import annotations

from typing import Any

from toolkit.compat import check_recipe
from toolkit.errors import PreflightError, RecipeError, SdtkError
from toolkit.progress import quiet
from toolkit.recipe import Recipe, load_recipe


def check_recipe_file(ref: str, overrides: tuple[str, ...] | list[str] = ()) -> dict[str, Any]:
    """Load and check one recipe without touching the machine; a dict for `recipes validate`."""
    try:
        recipe = load_recipe(ref, overrides)
        res = check_recipe(recipe)
        preflight = _offline_preflight(recipe)
    except SdtkError as e:
        field: str | None = "backend"
        if isinstance(e, RecipeError):
            field = e.field
        elif isinstance(e, PreflightError):
            field = "preflight"
        return {
            "path": str(ref),
            "ok": False,
            "error": " ".join(str(e).split())
            if isinstance(e, RecipeError)
            else f"{ref}: {' '.join(str(e).split())}",
            "field": field,
            "hint": e.hint,
        }
    out = {"path": str(ref), "ok": True, "mode": recipe.mode, "backend": res.backend, "why": res.why}
    if preflight is not None:
        out["preflight"] = preflight
    return out


def _offline_preflight(recipe: Recipe) -> str | None:
    """When every model source is a local path: the same preflight as `sdtk build` (a dry run:
    vocab, tokenizer, head fit, converter), so that validate refuses what build would. Hub ids
    are left to build (they would need the network). Raises PreflightFailed; returns a summary."""
    m = recipe.models
    sources = [s for s in (m.target, m.draft, m.medusa_heads, m.eagle_head, m.tokenizer) if s is not None]
    if any(s.path is None for s in sources):
        return None
    from toolkit.build.core import build  # lazily: validation of a plain recipe stays light

    r = build(recipe, dry_run=True, progress=quiet)
    counts = {s: sum(p["status"] == s for p in r.preflight) for s in ("passed", "skipped")}
    return f"{counts['passed']} passed, {counts['skipped']} skipped"
