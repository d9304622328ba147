"""Resolving a recipe's model sources: a hub id (with an optional revision) or a local directory,
to a local directory, through `huggingface_hub`, honouring at call time `HF_HOME` / `HF_HUB_CACHE`,
`HF_HUB_OFFLINE` and `HF_TOKEN` (read by huggingface_hub itself: sdtk never reads, prints, logs or
stores it; error texts pass through `runner.redact`). Every record is then inspected
(toolkit.hub.inspection). huggingface_hub is imported lazily.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from toolkit.errors import ModelError
from toolkit.hub import gguf
from toolkit.hub.inspection import ModelFacts, TokenizerFacts, inspect
from toolkit.runner import redact

if TYPE_CHECKING:
    from toolkit.recipe import ModelSource, Recipe

Fetch = Literal["none", "metadata", "full"]

# Files small enough to fetch for a dry run: configs and tokenizers, never weights.
METADATA_PATTERNS = [
    "*.json",
    "tokenizer.model",
    "*.tiktoken",
    "*.txt",
    "*.py",
]
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
# Never fetched, even for a full download: Meta's original/ consolidated weights (a second copy of
# Llama 3 checkpoints) and formats no backend here reads.
FULL_IGNORE = ["original/*", "*.pth", "*.gguf", "*.onnx", "*.msgpack", "*.h5", "*.ot", "*.tflite"]
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_TRUE = ("1", "true", "yes", "on")


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class HubSettings:
    cache_dir: Path
    offline: bool
    token_set: bool  # whether HF_TOKEN is set; never the token itself

    def to_dict(self) -> dict:
        return {"cache_dir": str(self.cache_dir), "offline": self.offline, "token_set": self.token_set}


def hub_settings() -> HubSettings:
    """The hub settings from the environment, read now (not at import)."""
    env = os.environ
    if env.get("HF_HUB_CACHE"):
        cache = Path(env["HF_HUB_CACHE"])
    elif env.get("HF_HOME"):
        cache = Path(env["HF_HOME"]) / "hub"
    elif env.get("XDG_CACHE_HOME"):
        cache = Path(env["XDG_CACHE_HOME"]) / "huggingface" / "hub"
    else:
        cache = Path.home() / ".cache" / "huggingface" / "hub"
    offline = env.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE
    token_set = bool(env.get("HF_TOKEN") or env.get("HUGGING_FACE_HUB_TOKEN"))
    return HubSettings(cache.expanduser(), offline, token_set)


@dataclass
class Resolved:
    """One model source of a recipe, resolved (or not) to a local directory, and inspected."""

    role: str  # "target" | "draft" | "medusa_heads" | "eagle_head" | "tokenizer"
    ref: str  # as written: hub id[@revision], path or GGUF file
    repo: str | None = None
    revision: str | None = None
    path: Path | None = None
    commit: str | None = None
    how: str = "unresolved"  # "local path" | "hub cache" | "hub download" | "gguf cache" | "gguf conversion" | "unresolved"
    reason: str | None = None  # why unresolved
    weights: bool = False  # weight files present in `path`
    facts: ModelFacts = field(default_factory=lambda: ModelFacts(source="none"))
    tokenizer: TokenizerFacts | None = None
    provenance: gguf.Provenance | None = None  # a GGUF source's conversion
    convert_to: Path | None = None  # a GGUF source not converted yet: where `sdtk build` converts it

    @property
    def resolved(self) -> bool:
        return self.path is not None

    @property
    def label(self) -> str:
        return f"{self.role} {self.ref}"

    def to_dict(self) -> dict:
        return {
            "role": self.role,
            "ref": self.ref,
            "repo": self.repo,
            "revision": self.revision,
            "resolved": self.resolved,
            "path": str(self.path) if self.path else None,
            "commit": self.commit,
            "how": self.how,
            "reason": self.reason,
            "weights": self.weights,
            "facts_source": self.facts.source,
            "facts": self.facts.to_dict(),
            "tokenizer": self.tokenizer.to_dict() if self.tokenizer else None,
            "provenance": self.provenance.to_dict() if self.provenance else None,
        }


# --------------------------------------------------------------------------- resolution


def has_weights(path: Path) -> bool:
    try:
        return any(p.suffix in WEIGHT_SUFFIXES and p.exists() for p in path.iterdir())
    except OSError:
        return False


def _commit_of(path: Path) -> str | None:
    """The commit of a hub-cache snapshot directory (`.../snapshots/<sha>`), else None."""
    for part in (path, *path.parents):
        if part.parent.name == "snapshots" and _COMMIT.match(part.name):
            return part.name
    return None


def _hub_error(e: BaseException) -> str:
    name = e.__class__.__name__
    text = " ".join(str(e).split())
    if len(text) > 300:
        text = text[:300] + "…"
    return redact(f"{name}: {text}")


def resolve(
    source: ModelSource,
    *,
    role: str,
    recipe: Recipe | None = None,
    fetch: Fetch = "metadata",
) -> Resolved:
    """Resolve one source to a local directory and inspect it.

    fetch: "none" (cache or local only), "metadata" (also download config and tokenizer files,
    never weights) or "full" (download the whole snapshot). Offline (HF_HUB_OFFLINE=1) always
    means cache only. Never raises for a missing model: the record says why it is unresolved.
    A GGUF source is converted (toolkit.hub.gguf) with fetch "full" only; otherwise an earlier
    conversion is used if the cache has one.
    """
    if source.gguf is not None:
        r = _resolve_gguf(source.gguf, recipe.base_dir if recipe is not None else None, role, fetch)
    elif source.path is not None:
        p = recipe.local_path(source) if recipe is not None else Path(source.path).expanduser().resolve()
        r = Resolved(role=role, ref=source.describe())
        if p is not None and p.is_dir():
            r.path, r.how, r.commit = p, "local path", _commit_of(p)
            r.weights = has_weights(p)
        else:
            r.reason = f"no such directory: {p}"
    else:
        r = _resolve_hub(source.repo or "", source.revision, role=role, fetch=fetch)
    inspect(r)
    return r


def _resolve_gguf(spec: str, base: Path | None, role: str, fetch: Fetch) -> Resolved:
    r = Resolved(role=role, ref=spec)
    try:
        path = gguf.checkpoint_dir(gguf.locate(spec, base))
        done = gguf.current(path)
        if fetch == "full":
            path = gguf.ensure_converted(spec, base)
    except ModelError as e:
        r.reason = str(e) + (f" ({e.hint})" if e.hint else "")
        return r
    r.provenance = gguf.provenance_of(path) if gguf.current(path) else None
    if r.provenance is None:
        r.reason, r.convert_to = f"not converted yet (sdtk build converts it into {path})", path
        return r
    r.path, r.weights = path, has_weights(path)
    r.how = "gguf cache" if done else "gguf conversion"
    return r


def _resolve_hub(repo: str, revision: str | None, *, role: str, fetch: Fetch) -> Resolved:
    ref = f"{repo}@{revision}" if revision else repo
    r = Resolved(role=role, ref=ref, repo=repo, revision=revision)
    settings = hub_settings()
    try:
        from huggingface_hub import snapshot_download
    except ImportError:  # pragma: no cover - a declared dependency
        r.reason = "huggingface_hub is not installed"
        return r

    def found(path: str, how: str) -> Resolved:
        p = Path(path)
        r.path, r.how, r.commit, r.weights, r.reason = p, how, _commit_of(p), has_weights(p), None
        return r

    cached: str | None = None
    try:
        cached = snapshot_download(
            repo, revision=revision, cache_dir=settings.cache_dir, local_files_only=True
        )
    except Exception as e:  # noqa: BLE001 - any cache miss is "not cached"
        r.reason = f"not in the cache at {settings.cache_dir} ({_hub_error(e)})"
    if cached is not None:
        usable = (Path(cached) / "config.json").exists() or fetch == "none"
        if usable and (fetch != "full" or has_weights(Path(cached))):
            return found(cached, "hub cache")
        if fetch == "none" or settings.offline:
            found(cached, "hub cache")
            return r
    if fetch == "none":
        return r
    if settings.offline:
        r.reason = f"HF_HUB_OFFLINE is set and {ref} is not in the cache at {settings.cache_dir}" + (
            " (no weights there)" if cached else ""
        )
        return r
    try:
        got = snapshot_download(
            repo,
            revision=revision,
            cache_dir=settings.cache_dir,
            allow_patterns=METADATA_PATTERNS if fetch == "metadata" else None,
            ignore_patterns=None if fetch == "metadata" else FULL_IGNORE,
        )
    except Exception as e:  # noqa: BLE001 - gated, missing, network: all reported, none raised
        r.reason = f"could not download {ref}: {_hub_error(e)}"
        if cached is not None:
            found(cached, "hub cache")
            r.reason = f"partial cache only; download failed: {_hub_error(e)}"
        return r
    return found(got, "hub download")
