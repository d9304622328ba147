"""The training data of `sdtk train-draft`: the workload, its hold-out split, and the target's own
responses (self-distillation), cached under the output directory with a hash of their inputs.

A head learns the target's distribution, not the dataset's answers (what upstream recommends), so
every prompt's response is the target's greedy continuation: from the reference runtime on this CPU,
or from a running sdtk deployment (`generate_with`: its URL or workdir), which generates at serving
speed on a GPU.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit._fs import atomic_write
from toolkit.bench import load_workload
from toolkit.errors import UsageError
from toolkit.server.state import find_deployment, read_state

CACHE_VERSION = 1


@dataclass(frozen=True)
class TrainPrompt:
    text: str
    category: str
    max_tokens: int


@dataclass(frozen=True)
class Example:
    prompt: str
    prompt_ids: list[int]
    output_ids: list[int]

    @property
    def ids(self) -> list[int]:
        return self.prompt_ids + self.output_ids


def load_prompts(data: str | Path) -> tuple[str, list[TrainPrompt]]:
    """(name, prompts) of `data`: a bundled workload name, a JSONL of prompts (`bench --prompts`
    format), or a local Hugging Face `datasets` directory (`save_to_disk`; a DatasetDict's `train`
    split, else its first) with a `prompt`, `text`, `messages` or `conversations` column (of a chat,
    the first user turn)."""
    p = Path(str(data))
    if p.is_dir():
        return _load_hf_dir(p)
    wl = load_workload(str(data))
    return wl.name, [TrainPrompt(p.text, p.category, p.max_tokens) for p in wl.prompts]


def _load_hf_dir(path: Path) -> tuple[str, list[TrainPrompt]]:
    try:
        import datasets
    except ImportError:
        raise UsageError(
            f"{path} is a directory: reading a Hugging Face dataset needs the `datasets` package",
            hint="pip install 'sdtk[train]' (it holds `datasets`), or pass a .jsonl of prompts",
        ) from None
    try:
        ds = datasets.load_from_disk(str(path))
    except FileNotFoundError:
        raise UsageError(
            f"{path} is a directory, but not a Hugging Face dataset (`save_to_disk`)",
            hint="pass a .jsonl of prompts, a bundled workload name, or a dataset saved with save_to_disk",
        ) from None
    if isinstance(ds, datasets.DatasetDict):
        if not ds:
            raise UsageError(f"{path}: the DatasetDict has no splits")
        ds = ds["train"] if "train" in ds else ds[next(iter(ds))]
    cols = set(ds.column_names)
    out = []
    for row in ds:
        if "prompt" in cols:
            text = row["prompt"]
        elif "text" in cols:
            text = row["text"]
        elif "messages" in cols or "conversations" in cols:
            msgs = row.get("messages") or row.get("conversations")
            text = next(
                (
                    m.get("content") or m.get("value")
                    for m in msgs
                    if m.get("role", m.get("from")) in ("user", "human")
                ),
                None,
            )
        else:
            raise UsageError(
                f"{path}: no `prompt`, `text`, `messages` or `conversations` column "
                f"(columns: {', '.join(sorted(cols))})",
                hint="rename the prompt column, e.g. ds.rename_column('question', 'prompt'), and save again",
            )
        if isinstance(text, str) and text.strip():
            out.append(TrainPrompt(text, "dataset", 128))
    if not out:
        raise UsageError(f"{path}: the dataset has no non-empty prompts")
    return f"dataset:{path.name}", out


def write_prompts(path: Path, prompts: Sequence[TrainPrompt]) -> Path:
    """A JSONL in the `bench --prompts` format (the hold-out split goes to `plan` this way)."""
    return atomic_write(
        path,
        "".join(
            json.dumps({"prompt": p.text, "category": p.category, "max_tokens": p.max_tokens}) + "\n"
            for p in prompts
        ),
    )


def split(
    prompts: Sequence[TrainPrompt], holdout: float, seed: int
) -> tuple[list[TrainPrompt], list[TrainPrompt]]:
    """(train, held out): a prompt is held out by the hash of its text and the seed, so the split
    does not depend on the file's order and a prompt never moves between the two sides."""
    if not 0 < holdout < 1:
        raise UsageError(f"--holdout must be between 0 and 1, got {holdout}")
    uniq = list({p.text: p for p in prompts}.values())
    if len(uniq) < 2:
        raise UsageError("the workload needs at least 2 distinct prompts (one to train on, one to hold out)")
    order = sorted(uniq, key=lambda p: hashlib.sha256(f"{seed}:{p.text}".encode()).hexdigest())
    n_hold = min(len(uniq) - 1, max(1, math.ceil(holdout * len(uniq))))
    held = {p.text for p in order[:n_hold]}
    return [p for p in uniq if p.text not in held], [p for p in uniq if p.text in held]


def model_fingerprint(path: Path) -> str:
    """sha256 over a checkpoint directory's files: contents of files up to 64 MB, name + size +
    mtime of larger ones (hashing a 16 GB target for a cache key would take minutes)."""
    h = hashlib.sha256()
    for f in sorted(Path(path).rglob("*")):
        if not f.is_file():
            continue
        st = f.stat()
        h.update(f.relative_to(path).as_posix().encode())
        if st.st_size <= 64 << 20:
            h.update(f.read_bytes())
        else:
            h.update(f"{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()


def cache_key(target_fp: str, prompts: Sequence[Any], max_new: int, source: str) -> str:
    h = hashlib.sha256()
    h.update(json.dumps([CACHE_VERSION, target_fp, max_new, source]).encode())
    for p in prompts:
        h.update(json.dumps([p.text, min(p.max_tokens, max_new)]).encode())
    return h.hexdigest()


def self_distill(
    prompts: Sequence[Any],
    *,
    target: Path,
    cache_dir: Path,
    max_new: int,
    generate_with: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[list[Example], dict[str, Any]]:
    """The target's greedy response to every prompt, from the cache when its key matches."""
    source = f"endpoint:{generate_with}" if generate_with else "reference runtime (CPU, float32, greedy)"
    key = cache_key(model_fingerprint(target), prompts, max_new, source)
    path = Path(cache_dir) / f"selfdistill-{key[:16]}.jsonl"
    info: dict[str, Any] = {"path": str(path), "input_hash": key, "source": source, "prompts": len(prompts)}
    if path.exists():
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        if len(rows) == len(prompts):
            info["cached"] = True
            exs = [Example(r["prompt"], r["prompt_ids"], r["output_ids"]) for r in rows]
            info["tokens"] = sum(len(e.ids) for e in exs)
            return exs, info
    gen = _endpoint_generator(generate_with, target) if generate_with else _reference_generator(target)
    exs = []
    for i, p in enumerate(prompts):
        exs.append(gen(p.text, min(p.max_tokens, max_new)))
        if progress:
            progress(i + 1, len(prompts))
    atomic_write(
        path,
        "".join(
            json.dumps({"prompt": e.prompt, "prompt_ids": e.prompt_ids, "output_ids": e.output_ids}) + "\n"
            for e in exs
        ),
    )
    info["cached"] = False
    info["tokens"] = sum(len(e.ids) for e in exs)
    return exs, info


def _reference_generator(target: Path) -> Callable[[str, int], Example]:
    from toolkit.reference import PLAIN, ReferenceRuntime

    rt = ReferenceRuntime.load(target=target)
    budget = rt.max_context

    def gen(text: str, max_new: int) -> Example:
        tok = rt.tokenizer
        ids = [int(i) for i in (tok(text)["input_ids"] if callable(tok) else tok.encode(text))]
        ids = ids[-(budget - max_new - 1) :]
        res = rt.generate(ids, max_new, spec=PLAIN)
        return Example(text, ids, [int(t) for t in res.token_ids])

    return gen


def _endpoint_generator(where: str, target: Path) -> Callable[[str, int], Example]:
    """A running deployment (HTTP URL, or a workdir whose state names it) generates the text;
    the target's tokenizer turns prompt and response back into ids."""
    from transformers import AutoTokenizer

    from toolkit.client import TritonClient

    url, model = where, "ensemble"
    if not where.startswith(("http://", "https://")) and Path(where).exists():
        st = read_state(find_deployment(Path(where)))
        if st is None:
            raise UsageError(f"no running deployment recorded in {where}", hint="sdtk deploy RECIPE --detach")
        url, model = st.http_url, st.model_name
    tok = AutoTokenizer.from_pretrained(str(target))
    client = TritonClient(url, protocol="http", model=model)

    def gen(text: str, max_new: int) -> Example:
        # The completion only, whatever the deployment's serving.exclude_input_in_output default.
        r = client.generate(text, max_new, temperature=0.0, exclude_input_in_output=True)
        ids = [int(i) for i in tok(text)["input_ids"]]
        full = [int(i) for i in tok(text + r.text)["input_ids"]]
        out = (
            full[len(ids) :]
            if full[: len(ids)] == ids
            else [int(i) for i in tok(r.text, add_special_tokens=False)["input_ids"]]
        )
        return Example(text, ids, out)

    return gen
