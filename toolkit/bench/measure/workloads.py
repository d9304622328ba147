"""Prompt sets for bench, plan and tune.

Bundled sets (toolkit/bench/data/*.jsonl, written for sdtk, CC0): code (Python-centric, what
the tiny CPU models know), math, chat (chat and writing), summarization; `mixed` interleaves
all four. A user's JSONL file has one object per line with `prompt` and optionally
`max_tokens` and `category` (other fields are ignored; blank lines and `#` lines are skipped).
`synthetic` makes random token-ish words: fine for load, meaningless for acceptance, and
every report that uses it says so.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from toolkit.bench.errors import WorkloadError
from toolkit.bench.options import RunOptions
from toolkit.errors import did_you_mean

CATEGORIES = ("code", "math", "chat", "summarization")
BUNDLED = (*CATEGORIES, "mixed")
SYNTHETIC = "synthetic"
SYNTHETIC_WARNING = "synthetic: unrealistic for acceptance"
DEFAULT_MAX_TOKENS = 128
# Why words and not random ids: the served endpoints take text; random ids would detokenise
# to garbage of unpredictable length.
_SYLLABLES = (
    "ka",
    "lo",
    "mi",
    "ten",
    "ra",
    "vus",
    "el",
    "on",
    "dri",
    "pa",
    "sel",
    "ux",
    "or",
    "fin",
    "ga",
    "tem",
    "is",
    "bro",
    "nu",
    "qua",
    "zel",
    "ap",
    "mor",
    "ti",
    "ex",
    "len",
    "sa",
    "dun",
    "ri",
    "co",
)


@dataclass(frozen=True)
class Prompt:
    text: str
    category: str
    max_tokens: int
    source_line: int | None = None  # line number in the source file (1-based), if any

    def to_dict(self) -> dict[str, Any]:
        return {"prompt": self.text, "category": self.category, "max_tokens": self.max_tokens}


@dataclass
class Workload:
    name: str
    source: str
    prompts: list[Prompt]
    synthetic: bool = False
    warnings: list[str] = field(default_factory=list)
    # What the reports print about how the prompts were sent: the chat-template line
    # (toolkit.hub.chat) and, for a GGUF target, its weights' provenance (toolkit.hub.gguf).
    notes: list[str] = field(default_factory=list)

    @property
    def categories(self) -> list[str]:
        return sorted({p.category for p in self.prompts})

    def sample(self, n: int, seed: int) -> list[Prompt]:
        """`n` prompts in a seeded order: a shuffled pass over the set, repeated as needed.

        The same (workload, n, seed) always gives the same list, which is what makes an A/B
        comparison fair: both sides see identical requests in identical order.
        """
        if n <= 0:
            return []
        rng = random.Random(seed)
        out: list[Prompt] = []
        while len(out) < n:
            order = list(self.prompts)
            rng.shuffle(order)
            out.extend(order)
        return out[:n]

    def with_max_tokens(self, max_tokens: int | None) -> Workload:
        if max_tokens is None:
            return self
        _check_max_tokens(max_tokens, "max_tokens")
        return replace(self, prompts=[replace(p, max_tokens=max_tokens) for p in self.prompts])

    def rendered(self, render: Callable[[str], str], notes: list[str]) -> Workload:
        """The same prompts as a client sends them (`render`: e.g. a chat template), with `notes`."""
        prompts = [replace(p, text=render(p.text)) for p in self.prompts]
        return replace(self, prompts=prompts, notes=[*self.notes, *notes])

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "source": self.source,
            "prompts": len(self.prompts),
            "categories": self.categories,
            "synthetic": self.synthetic,
            "warnings": list(self.warnings),
            "notes": list(self.notes),
        }


def _check_max_tokens(value: Any, what: str, *, path: Path | None = None, line: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise WorkloadError(
            f"{what} must be a positive integer, got {value!r}",
            path=path,
            line=line,
            hint='e.g. "max_tokens": 128',
        )
    return value


def read_prompt_file(path: Path | str, *, category: str | None = None) -> list[Prompt]:
    """Parse a JSONL prompt file; every problem names the file and line."""
    path = Path(path)
    hint = 'one JSON object per line, e.g. {"prompt": "def fib(n):", "max_tokens": 64}'
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise WorkloadError("no such prompt file", path=path, hint="check the --prompts path") from None
    except (IsADirectoryError, PermissionError) as e:
        raise WorkloadError(f"cannot read prompt file: {e.__class__.__name__}", path=path) from None
    except UnicodeDecodeError as e:
        raise WorkloadError(f"not UTF-8 text ({e.reason} at byte {e.start})", path=path, hint=hint) from None
    default_cat = category or path.stem
    prompts: list[Prompt] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise WorkloadError(
                f"not valid JSON ({e.msg} at column {e.colno})", path=path, line=lineno, hint=hint
            ) from None
        if not isinstance(obj, dict):
            raise WorkloadError(
                f"expected a JSON object, got {type(obj).__name__}", path=path, line=lineno, hint=hint
            )
        if "prompt" not in obj:
            keys = ", ".join(sorted(obj)) or "none"
            guess = did_you_mean("prompt", obj.keys())
            raise WorkloadError(
                f"missing field 'prompt' (fields present: {keys})"
                + (f"; did you mean to rename '{guess}'?" if guess else ""),
                path=path,
                line=lineno,
                hint=hint,
            )
        prompt = obj["prompt"]
        if not isinstance(prompt, str) or not prompt.strip():
            raise WorkloadError("'prompt' must be a non-empty string", path=path, line=lineno, hint=hint)
        max_tokens = obj.get("max_tokens", DEFAULT_MAX_TOKENS)
        _check_max_tokens(max_tokens, "'max_tokens'", path=path, line=lineno)
        cat = obj.get("category", default_cat)
        if not isinstance(cat, str) or not cat:
            raise WorkloadError("'category' must be a non-empty string", path=path, line=lineno)
        prompts.append(Prompt(prompt, cat, max_tokens, lineno))
    if not prompts:
        raise WorkloadError(
            "the prompt file has no prompts (only blank or # lines)"
            if text.strip()
            else "the prompt file is empty",
            path=path,
            hint=hint,
        )
    return prompts


def bundled_path(name: str) -> Path:
    return Path(str(resources.files("toolkit.bench").joinpath("data").joinpath(f"{name}.jsonl")))


def synthetic_prompts(
    n: int = 64, *, words: int = 48, max_tokens: int = DEFAULT_MAX_TOKENS, seed: int = 0
) -> list[Prompt]:
    """Random pseudo-words: a load shape, not language. Acceptance measured on it is meaningless."""
    if n < 1 or words < 1:
        raise WorkloadError(f"synthetic workload needs n ≥ 1 and words ≥ 1 (got n={n}, words={words})")
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        toks = ["".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 3))) for _ in range(words)]
        out.append(Prompt(" ".join(toks), SYNTHETIC, max_tokens))
    return out


def load_workload(
    name: str | None = None,
    *,
    prompts_file: Path | str | None = None,
    max_tokens: int | None = None,
    synthetic_words: int = 48,
    seed: int = 0,
) -> Workload:
    """A bundled set (`code`, `math`, `chat`, `summarization`, `mixed`), `synthetic`, or a JSONL file.

    `max_tokens`, when given, overrides every prompt's own value.
    """
    if prompts_file is not None and name not in (None, ""):
        raise WorkloadError(
            f"give either a workload name ('{name}') or a prompt file ({prompts_file}), not both"
        )
    if prompts_file is not None:
        p = Path(prompts_file)
        wl = Workload(name=f"file:{p.name}", source=str(p.resolve()), prompts=read_prompt_file(p))
        return wl.with_max_tokens(max_tokens)
    name = name or "mixed"
    if name == SYNTHETIC:
        wl = Workload(
            name=SYNTHETIC,
            source="generated (random pseudo-words)",
            prompts=synthetic_prompts(
                words=synthetic_words, seed=seed, max_tokens=max_tokens or DEFAULT_MAX_TOKENS
            ),
            synthetic=True,
            warnings=[SYNTHETIC_WARNING],
        )
        return wl
    if name not in BUNDLED:
        p = Path(name)
        if p.suffix in (".jsonl", ".json") or p.exists():
            return load_workload(prompts_file=p, max_tokens=max_tokens)
        guess = did_you_mean(name, [*BUNDLED, SYNTHETIC])
        raise WorkloadError(
            f"unknown workload '{name}'" + (f"; did you mean '{guess}'?" if guess else ""),
            hint="choose one of " + ", ".join([*BUNDLED, SYNTHETIC]) + ", or pass --prompts FILE.jsonl",
        )
    if name == "mixed":
        # Round-robin over the categories so that any prefix of the set is balanced.
        per = [read_prompt_file(bundled_path(c)) for c in CATEGORIES]
        prompts = [ps[i] for i in range(max(map(len, per))) for ps in per if i < len(ps)]
        wl = Workload(name="mixed", source="bundled:" + ",".join(CATEGORIES), prompts=prompts)
    else:
        wl = Workload(name=name, source=f"bundled:{name}.jsonl", prompts=read_prompt_file(bundled_path(name)))
    return wl.with_max_tokens(max_tokens)


def workload_for(opts: RunOptions) -> Workload:
    """The workload a run's options name: a loaded Workload as is, else a bundled name or the
    prompt file; `max_tokens` overrides every prompt's own either way."""
    if isinstance(opts.workload, Workload):
        wl = opts.workload
        return wl.with_max_tokens(opts.max_tokens) if opts.max_tokens is not None else wl
    return load_workload(
        None if opts.prompts_file else opts.workload,
        prompts_file=opts.prompts_file,
        max_tokens=opts.max_tokens,
        seed=opts.seed,
    )
