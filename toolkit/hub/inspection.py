"""Inspecting a resolved checkpoint: `config.json` (architecture numbers), the tokenizer files
(vocabulary size, special ids and a fingerprint of the token table) and, for speculative heads,
tensor shapes from safetensors headers. Without a readable checkpoint the architecture numbers come
from the bundled catalogue (`toolkit.catalogue`), and every record says which source it used.

Importable without torch, transformers or tensorrt_llm.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
from array import array
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit import catalogue
from toolkit.modes import EAGLE, EAGLE3, MEDUSA, MEDUSA_HEAD_MODEL_TYPE

if TYPE_CHECKING:
    from toolkit.hub.resolution import Resolved

# --------------------------------------------------------------------------- records


@dataclass
class ModelFacts:
    """Architecture numbers of one checkpoint, and where they came from."""

    source: str  # "config.json" | "catalogue" | "none"
    cite: str | None = None  # the file read, or the catalogue's citation
    architecture: str | None = None
    model_type: str | None = None
    vocab_size: int | None = None
    hidden_size: int | None = None
    intermediate_size: int | None = None
    num_hidden_layers: int | None = None
    num_attention_heads: int | None = None
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    max_position_embeddings: int | None = None
    dtype: str | None = None
    tie_word_embeddings: bool | None = None
    attention_bias: bool | None = None
    parameters: int | None = None
    parameters_estimated: bool = False
    bos_token_id: int | list[int] | None = None
    eos_token_id: int | list[int] | None = None
    # Speculative heads.
    head_kind: str | None = None  # the mode the head is for: MEDUSA, EAGLE or EAGLE3 (toolkit.modes)
    draft_vocab_size: int | None = None
    medusa_num_heads: int | None = None  # from the weights when readable, else config.json
    medusa_num_heads_config: int | None = None  # what config.json says (may differ: vicuna-7b-v1.3)
    medusa_num_layers: int | None = None
    layers_to_capture: list[int] | None = None

    @property
    def known(self) -> bool:
        return self.source != "none"

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass
class TokenizerFacts:
    """The token table of a tokenizer: size, special ids and a fingerprint."""

    source: str  # the file read, e.g. "/abs/tokenizer.json"
    kind: str  # "tokenizer.json" | "tokenizer.model (file hash)"
    vocab_size: int | None
    fingerprint: str  # sha256 prefix of the sorted (id, token) table, or of the file
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    pad_token_id: int | None = None
    unk_token_id: int | None = None

    @property
    def comparable(self) -> bool:
        """True when the fingerprint covers the token table itself (not just a file's bytes)."""
        return self.kind == "tokenizer.json"

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


# --------------------------------------------------------------------------- inspection


def inspect(r: Resolved) -> Resolved:
    """Fill `facts` (config.json, else the catalogue) and `tokenizer` of a resolved record."""
    facts = None
    if r.path is not None:
        cfg = read_json(r.path / "config.json")
        if cfg is not None:
            facts = facts_from_config(cfg, cite=str(r.path / "config.json"))
            if facts.head_kind == MEDUSA:
                _medusa_from_weights(r.path, facts)
        r.tokenizer = inspect_tokenizer(r.path)
    if facts is None:
        entry = catalogue.lookup(r.repo)
        if entry is not None:
            facts = facts_from_catalogue(entry)
    if facts is None:
        facts = ModelFacts(source="none")
    if facts.parameters is None and facts.known:
        n = estimate_parameters(facts)
        if n:
            facts.parameters, facts.parameters_estimated = n, True
    r.facts = facts
    return r


def read_json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _norm_dtype(v: Any) -> str | None:
    if v is None:
        return None
    s = str(v).replace("torch.", "").lower()
    return {
        "bf16": "bfloat16",
        "fp16": "float16",
        "half": "float16",
        "fp32": "float32",
        "float": "float32",
    }.get(s, s)


def facts_from_config(cfg: dict, *, cite: str) -> ModelFacts:
    """Architecture numbers from a Hugging Face config.json (incl. Medusa and EAGLE-3 heads)."""
    text = cfg.get("text_config")
    if isinstance(text, dict) and "hidden_size" not in cfg:
        cfg = {**cfg, **text}
    archs = cfg.get("architectures") or []
    arch = archs[0] if archs else None
    heads = cfg.get("num_attention_heads")
    hidden = cfg.get("hidden_size")
    head_dim = cfg.get("head_dim") or (hidden // heads if hidden and heads else None)
    raw_eagle = cfg.get("eagle_config")
    eagle_cfg = raw_eagle if isinstance(raw_eagle, dict) else {}
    layers = (
        cfg.get("eagle_aux_hidden_state_layer_ids")
        or eagle_cfg.get("eagle_aux_hidden_state_layer_ids")
        or cfg.get("eagle3_layers_to_capture")
    )
    kind = None
    if "medusa_num_heads" in cfg or cfg.get("model_type") == MEDUSA_HEAD_MODEL_TYPE:
        kind = MEDUSA
    elif "draft_vocab_size" in cfg or (arch and "Eagle3" in arch) or layers:
        kind = EAGLE3
    return ModelFacts(
        source="config.json",
        cite=cite,
        architecture=arch,
        model_type=cfg.get("model_type"),
        vocab_size=cfg.get("vocab_size"),
        hidden_size=hidden,
        intermediate_size=cfg.get("intermediate_size"),
        num_hidden_layers=cfg.get("num_hidden_layers"),
        num_attention_heads=heads,
        num_key_value_heads=cfg.get("num_key_value_heads") or heads,
        head_dim=head_dim,
        max_position_embeddings=cfg.get("max_position_embeddings"),
        dtype=_norm_dtype(cfg.get("torch_dtype") or cfg.get("dtype")),
        tie_word_embeddings=cfg.get("tie_word_embeddings"),
        attention_bias=True if cfg.get("model_type") == "qwen2" else cfg.get("attention_bias"),
        bos_token_id=cfg.get("bos_token_id"),
        eos_token_id=cfg.get("eos_token_id"),
        head_kind=kind,
        draft_vocab_size=cfg.get("draft_vocab_size"),
        medusa_num_heads=cfg.get("medusa_num_heads"),
        medusa_num_heads_config=cfg.get("medusa_num_heads"),
        medusa_num_layers=cfg.get("medusa_num_layers"),
        layers_to_capture=list(layers) if layers else None,
    )


def facts_from_catalogue(entry: dict) -> ModelFacts:
    known = {f for f in ModelFacts.__dataclass_fields__}
    kw = {k: v for k, v in entry.items() if k in known and k not in ("source", "cite")}
    return ModelFacts(source="catalogue", cite=entry.get("cite"), **kw)


def estimate_parameters(f: ModelFacts) -> int | None:
    """Parameter count from the architecture numbers (Llama/Qwen2-style decoders and their heads)."""
    v, h, n = f.vocab_size, f.hidden_size, f.num_hidden_layers
    if f.head_kind == MEDUSA:
        if not (v and h and f.medusa_num_heads):
            return None
        per_head = (f.medusa_num_layers or 1) * (h * h + h) + v * h
        return f.medusa_num_heads * per_head
    heads, kv, inter = f.num_attention_heads, f.num_key_value_heads, f.intermediate_size
    if not (v and h and n and heads and kv and inter):
        return None
    hd = f.head_dim or h // heads
    q, kvd = heads * hd, kv * hd
    if f.head_kind == EAGLE3:
        # fc (3h -> h), one layer whose q/k/v take 2h inputs, three norms, final norm, draft lm_head.
        dv = f.draft_vocab_size or v
        layer = 2 * h * q + 2 * (2 * h * kvd) + q * h + 3 * h * inter + 3 * h
        return 3 * h * h + layer + h + dv * h
    attn = h * q + 2 * h * kvd + q * h
    if f.attention_bias:
        attn += q + 2 * kvd
    layer = attn + 3 * h * inter + 2 * h
    total = v * h + n * layer + h
    if f.head_kind == EAGLE:
        return 2 * h * h + h + layer + v * h  # fc (2h -> h, bias), one layer, embedding
    if not f.tie_word_embeddings:
        total += v * h
    return total


# --------------------------------------------------------------------------- tokenizers


def _token_id(tok: Any, vocab: dict[str, int]) -> int | None:
    if isinstance(tok, dict):
        tok = tok.get("content")
    if isinstance(tok, str):
        return vocab.get(tok)
    return None


def inspect_tokenizer(path: Path) -> TokenizerFacts | None:
    """Token table facts from tokenizer.json (preferred) or a tokenizer.model file hash."""
    tj = path / "tokenizer.json"
    cfg = read_json(path / "tokenizer_config.json") or {}
    if tj.exists():
        data = read_json(tj)
        if data is not None:
            vocab: dict[str, int] = {}
            model = data.get("model") or {}
            mv = model.get("vocab")
            if isinstance(mv, dict):
                vocab.update({str(k): int(i) for k, i in mv.items()})
            elif isinstance(mv, list):  # Unigram: [[piece, score], ...]
                vocab.update({str(p[0]): i for i, p in enumerate(mv)})
            for added in data.get("added_tokens") or []:
                if isinstance(added, dict) and "content" in added and "id" in added:
                    vocab[str(added["content"])] = int(added["id"])
            table = "\n".join(f"{i}\t{t}" for t, i in sorted(vocab.items(), key=lambda kv: (kv[1], kv[0])))
            size = (max(vocab.values()) + 1) if vocab else 0
            return TokenizerFacts(
                source=str(tj),
                kind="tokenizer.json",
                vocab_size=size,
                fingerprint=hashlib.sha256(table.encode("utf-8")).hexdigest()[:16],
                bos_token_id=_token_id(cfg.get("bos_token"), vocab),
                eos_token_id=_token_id(cfg.get("eos_token"), vocab),
                pad_token_id=_token_id(cfg.get("pad_token"), vocab),
                unk_token_id=_token_id(cfg.get("unk_token"), vocab),
            )
    sp = path / "tokenizer.model"
    if sp.exists():
        digest = hashlib.sha256(sp.read_bytes()).hexdigest()[:16]
        mcfg = read_json(path / "config.json") or {}
        return TokenizerFacts(
            source=str(sp),
            kind="tokenizer.model (file hash)",
            vocab_size=mcfg.get("vocab_size"),
            fingerprint=digest,
            bos_token_id=mcfg.get("bos_token_id") if isinstance(mcfg.get("bos_token_id"), int) else None,
            eos_token_id=mcfg.get("eos_token_id") if isinstance(mcfg.get("eos_token_id"), int) else None,
        )
    return None


# --------------------------------------------------------------------------- tensors


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    file: Path
    begin: int  # absolute byte offset of the data in `file`
    end: int


def safetensors_index(path: Path) -> dict[str, TensorInfo]:
    """Names, dtypes and shapes of every tensor in the directory's *.safetensors files (headers only)."""
    out: dict[str, TensorInfo] = {}
    for f in sorted(path.glob("*.safetensors")):
        try:
            with f.open("rb") as fh:
                (n,) = struct.unpack("<Q", fh.read(8))
                if n > f.stat().st_size - 8:  # not a header length: a corrupt file (read(n) = MemoryError)
                    continue
                header = json.loads(fh.read(n))
        except (OSError, ValueError, struct.error):
            continue
        base = 8 + n
        for name, meta in header.items():
            if name == "__metadata__" or not isinstance(meta, dict):
                continue
            b, e = meta.get("data_offsets", (0, 0))
            out[name] = TensorInfo(
                name, str(meta.get("dtype")), tuple(meta.get("shape", ())), f, base + b, base + e
            )
    return out


def torch_index(
    path: Path, names: tuple[str, ...] = ("*.pt", "*.bin", "*.pth")
) -> dict[str, tuple[int, ...]] | None:
    """Tensor shapes from torch pickles, when torch is installed (None otherwise)."""
    files = [f for pat in names for f in sorted(path.glob(pat))]
    if not files:
        return {}
    try:
        import torch
    except ImportError:
        return None
    shapes: dict[str, tuple[int, ...]] = {}
    for f in files:
        try:
            sd = torch.load(f, map_location="cpu", weights_only=True, mmap=True)
        except Exception:  # noqa: BLE001 - an unreadable pickle is just not inspected
            continue
        if isinstance(sd, dict):
            for k, v in sd.items():
                if hasattr(v, "shape"):
                    shapes[str(k)] = tuple(int(x) for x in v.shape)
    return shapes


def read_int_tensor(info: TensorInfo) -> list[int] | None:
    """An integer tensor's values (I64/I32/U8/BOOL), read straight from a safetensors file."""
    codes = {"I64": "q", "I32": "i", "I16": "h", "U8": "B", "BOOL": "B", "I8": "b"}
    code = codes.get(info.dtype)
    if code is None:
        return None
    with info.file.open("rb") as fh:
        fh.seek(info.begin)
        raw = fh.read(info.end - info.begin)
    arr = array(code)
    arr.frombytes(raw)
    if arr.itemsize > 1 and struct.pack("=H", 1) != struct.pack("<H", 1):  # pragma: no cover
        arr.byteswap()
    return arr.tolist()


_MEDUSA_KEY = re.compile(r"^(?:medusa_heads?\.)?(\d+)\.(\d+)\.(?:linear\.)?weight$")


def medusa_heads(path: Path) -> dict[str, Any] | None:
    """Medusa head count, width and output vocabulary read from the heads' weights.

    Layouts: FasterDecoding `medusa_lm_head.{safetensors,pt}` (`{i}.{j}.linear.weight` ResBlocks,
    `{i}.{L}.weight` the head's lm layer) and the same keys under a `medusa_head(s).` prefix.
    None when there are no readable weights.
    """
    shapes: dict[str, tuple[int, ...]] = {n: t.shape for n, t in safetensors_index(path).items()}
    if not shapes:
        th = torch_index(path)
        if th is None:
            return None
        shapes = th
    heads: dict[int, dict[int, tuple[int, ...]]] = {}
    for name, shape in shapes.items():
        m = _MEDUSA_KEY.match(name)
        if m and len(shape) == 2:
            heads.setdefault(int(m.group(1)), {})[int(m.group(2))] = shape
    if not heads:
        return None
    hidden = vocab = None
    for layers in heads.values():
        last = max(layers)
        vocab = layers[last][0]
        hidden = layers[last][1]
    return {"num_heads": len(heads), "hidden_size": hidden, "vocab_size": vocab}


def _medusa_from_weights(path: Path, facts: ModelFacts) -> None:
    found = medusa_heads(path)
    if not found:
        return
    facts.medusa_num_heads = found["num_heads"]
    facts.hidden_size = facts.hidden_size or found["hidden_size"]
    facts.vocab_size = facts.vocab_size or found["vocab_size"]


def eagle3_vocab_map(path: Path) -> dict[str, Any] | None:
    """EAGLE-3 `d2t` (draft→target offsets) and `t2d` facts from the head's safetensors; None if absent."""
    idx = safetensors_index(path)
    d2t = next((t for n, t in idx.items() if n == "d2t" or n.endswith(".d2t")), None)
    if d2t is None:
        return None
    values = read_int_tensor(d2t)
    out: dict[str, Any] = {"d2t_len": d2t.shape[0] if d2t.shape else 0, "file": str(d2t.file)}
    if values:
        out["max_target_id"] = max(i + off for i, off in enumerate(values))
        out["min_target_id"] = min(i + off for i, off in enumerate(values))
    t2d = next((t for n, t in idx.items() if n == "t2d" or n.endswith(".t2d")), None)
    if t2d is not None:
        out["t2d_len"] = t2d.shape[0] if t2d.shape else 0
    return out


# --------------------------------------------------------------------------- fingerprints


def tree_fingerprint(path: Path) -> list[tuple[str, int, int]]:
    """(relative path, size, mtime_ns) of every file under `path`: cheap input identity for stamps."""
    out = []
    if path.is_file():
        st = path.stat()
        return [(path.name, st.st_size, st.st_mtime_ns)]
    for root, dirs, files in os.walk(path, followlinks=False):
        dirs.sort()
        for name in sorted(files):
            p = Path(root) / name
            try:
                st = p.stat()
            except OSError:
                continue
            out.append((str(p.relative_to(path)), st.st_size, st.st_mtime_ns))
    return out
