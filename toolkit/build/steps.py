"""Build steps: stamped, atomic, resumable; and their rendering as a runnable shell script.

A step produces one output directory (`dest`). It runs into `<dest>.incomplete`, writes its
stamp (`.sdtk-stamp.json`: a hash of argv or file contents, input file identities, the stamps
of the steps it depends on, sdtk and TensorRT-LLM versions) into it, and is published with
`os.replace`. A rerun skips a step whose published stamp matches; a killed step leaves only an
`.incomplete` directory, which is never accepted and is removed by the next run.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from toolkit import __version__, _fs
from toolkit.hub import tree_fingerprint
from toolkit.runner import redact, run
from toolkit.shellsafe import comment, heredoc_tag

STAMP = ".sdtk-stamp.json"
INCOMPLETE = _fs.INCOMPLETE


@dataclass
class Step:
    name: str  # also the log name: logs/<name>.log
    title: str  # one line for progress and the runbook
    dest: Path
    argv: list[str] | None = None  # a subprocess step ...
    files: dict[str, str] | None = None  # ... or an in-process step writing these files into dest
    inputs: list[Path] = field(default_factory=list)  # files/dirs whose identity is stamped
    after: list[str] = field(default_factory=list)  # steps whose outputs this one consumes
    hint: str | None = None  # shown when the step fails

    def to_dict(self) -> dict:
        d: dict = {"name": self.name, "title": self.title, "dest": str(self.dest), "after": self.after}
        if self.argv is not None:
            d["argv"] = self.argv
        if self.files is not None:
            d["files"] = sorted(self.files)
        return d


@dataclass
class StepRecord:
    name: str
    status: str  # "ran" | "skipped" | "planned"
    seconds: float
    dest: str
    stamp: str
    argv: list[str] | None = None
    log: str | None = None

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v is not None}


# --------------------------------------------------------------------------- stamps


def _sha(data: str | bytes) -> str:
    return hashlib.sha256(data.encode("utf-8") if isinstance(data, str) else data).hexdigest()


def stamp_of(step: Step, upstream: dict[str, str], extra: dict) -> str:
    payload = {
        "step": step.name,
        "argv": step.argv,
        "files": {k: _sha(v) for k, v in sorted((step.files or {}).items())},
        "inputs": {str(p): tree_fingerprint(p) if p.exists() else None for p in step.inputs},
        "after": {n: upstream.get(n) for n in step.after},
        "sdtk": __version__,
        **extra,
    }
    return _sha(json.dumps(payload, sort_keys=True, default=str))


def read_stamp(dest: Path) -> str | None:
    try:
        return json.loads((dest / STAMP).read_text(encoding="utf-8")).get("stamp")
    except (OSError, ValueError, AttributeError):
        return None


def _incomplete(dest: Path) -> Path:
    return dest.with_name(dest.name + INCOMPLETE)


def clean_stale(dest: Path) -> None:
    """Remove what a killed run left next to `dest`: `<dest>.incomplete` and `<dest>.old-*`."""
    for p in [_incomplete(dest), *dest.parent.glob(dest.name + ".old-*")] if dest.parent.exists() else []:
        shutil.rmtree(p, ignore_errors=True)


# --------------------------------------------------------------------------- execution


def _concrete(argv: list[str]) -> list[str]:
    """The plan writes `python3` (portable in the runbook); run it with this interpreter."""
    return [sys.executable, *argv[1:]] if argv and argv[0] == "python3" else list(argv)


def execute(
    steps: list[Step],
    *,
    log_dir: Path,
    extra: dict,
    progress: Callable[[str], None],
) -> list[StepRecord]:
    stamps: dict[str, str] = {}
    records: list[StepRecord] = []
    for i, step in enumerate(steps, 1):
        stamp = stamp_of(step, stamps, extra)
        stamps[step.name] = stamp
        head = f"[{i}/{len(steps)}] {step.name}"
        clean_stale(step.dest)
        if step.dest.is_dir() and read_stamp(step.dest) == stamp:
            progress(f"{head}: up to date, skipped ({step.dest})")
            records.append(StepRecord(step.name, "skipped", 0.0, str(step.dest), stamp, step.argv))
            continue
        progress(f"{head}: {step.title}")
        tmp = _incomplete(step.dest)
        tmp.mkdir(parents=True)
        t0 = time.monotonic()
        log = None
        seconds = 0.0
        try:
            if step.argv is not None:
                argv = [str(tmp) if a == str(step.dest) else a for a in _concrete(step.argv)]
                res = run(argv, step=step.name, log_dir=log_dir, hint=step.hint)
                log = str(res.log_path) if res.log_path else None
            for rel, text in (step.files or {}).items():
                (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
                (tmp / rel).write_text(text, encoding="utf-8")
            seconds = time.monotonic() - t0
            (tmp / STAMP).write_text(
                json.dumps(
                    {"stamp": stamp, "step": step.name, "sdtk": __version__, "seconds": round(seconds, 3)},
                    indent=2,
                ),
                encoding="utf-8",
            )
            _fs.publish_dir(tmp, step.dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        progress(f"{head}: done in {seconds:.1f}s")
        records.append(StepRecord(step.name, "ran", round(seconds, 3), str(step.dest), stamp, step.argv, log))
    return records


# --------------------------------------------------------------------------- the runbook

_SAFE = re.compile(r"^[A-Za-z0-9_./=:,+@%-]+$")
_VAR = re.compile(r"\$\{[A-Z][A-Z0-9_]*\}")


def _live(s: str, live: set[str] | None) -> list[re.Match[str]]:
    """The `${VAR}` references in `s` that name a variable the script defines (others stay literal)."""
    return [m for m in _VAR.finditer(s) if live is not None and m.group(0)[2:-1] in live]


def shell_word(s: str, prefixes: dict[str, str] | None = None, live: set[str] | None = None) -> str:
    """Quote one argv element; known path prefixes become `${VAR}`, and `${VAR}` stays live for
    the variables in `live` (the script's own; the prefixes' always). Anything else is literal."""
    live = set(live or ()) | set((prefixes or {}).values())
    for value, var in (prefixes or {}).items():
        v = value.rstrip("/")
        if s == v or s.startswith(v + "/"):
            s = "${" + var + "}" + s[len(v) :]
            break
    if _SAFE.fullmatch(s):
        return s
    refs = _live(s, live)
    if refs:
        parts, last = [], 0
        for m in refs:
            parts.append(_dq(s[last : m.start()]) + m.group(0))
            last = m.end()
        parts.append(_dq(s[last:]))
        return '"' + "".join(parts) + '"'
    return shlex.quote(s)


def _dq(s: str) -> str:
    return re.sub(r'([\\"$`])', r"\\\1", s)


def render_command(
    argv: list[str], prefixes: dict[str, str] | None = None, indent: str = "", live: set[str] | None = None
) -> str:
    """argv as a shell command, one `--flag value` pair per line."""
    words = [shell_word(a, prefixes, live) for a in argv]
    lines: list[str] = []
    cur: list[str] = []
    for w, raw in zip(words, argv, strict=True):
        if raw.startswith("--") and cur:
            lines.append(" ".join(cur))
            cur = []
        cur.append(w)
    if cur:
        lines.append(" ".join(cur))
    return indent + (" \\\n" + indent + "    ").join(lines)


def render_files(step: Step, prefixes: dict[str, str], live: set[str] | None = None) -> str:
    """`mkdir` and one here-document per file. The terminator never occurs as a line of the body;
    only the script's own `${VAR}`s expand, everything else is escaped (or the heredoc is quoted)."""
    live = set(live or ()) | set(prefixes.values())
    dest = shell_word(str(step.dest), prefixes, live)
    out = [f"mkdir -p -- {dest}"]
    for rel, text in (step.files or {}).items():
        target = shell_word(str(step.dest / rel), prefixes, live)
        refs = _live(text, live)
        if refs:
            parts, last = [], 0
            for m in refs:
                parts.append(re.sub(r"([\\$`])", r"\\\1", text[last : m.start()]) + m.group(0))
                last = m.end()
            parts.append(re.sub(r"([\\$`])", r"\\\1", text[last:]))
            body = "".join(parts).rstrip("\n")
            tag = heredoc_tag(body)
            out.append(f"cat > {target} <<{tag}\n{body}\n{tag}")
        else:
            body = text.rstrip("\n")
            tag = heredoc_tag(body)
            out.append(f"cat > {target} <<'{tag}'\n{body}\n{tag}")
    return "\n".join(out)


FETCH_FUNCTION = """\
# fetch REPO [REVISION]: download a checkpoint into the Hugging Face cache and print its directory.
# Honours HF_HOME, HF_HUB_OFFLINE and HF_TOKEN from the environment (never written here).
fetch() {
  python3 - "$@" <<'PY'
import sys
from huggingface_hub import snapshot_download
print(snapshot_download(sys.argv[1], revision=(sys.argv[2] if len(sys.argv) > 2 else None)))
PY
}"""


def render_script(
    *,
    header: list[str],
    variables: list[tuple[str, str, str]],  # (name, shell expression, comment)
    needs_fetch: bool,
    steps: list[Step],
    prefixes: dict[str, str],
    footer: list[str],
) -> str:
    # Every interpolated text in a comment goes through `comment` (a newline would end it).
    out = ["#!/usr/bin/env bash", *[f"# {comment(h)}" if h else "#" for h in header], "set -euo pipefail", ""]
    if needs_fetch:
        out += [FETCH_FUNCTION, ""]
    live = {name for name, _, _ in variables}
    for name, expr, note in variables:
        if note:
            out.append(f"# {comment(note)}")
        out.append(f"{name}={expr}")
    if variables:
        out.append("")
    for i, step in enumerate(steps, 1):
        out.append(f"# --- step {i}/{len(steps)}: {step.name}: {comment(step.title)}")
        if step.argv is not None:
            out.append(render_command(step.argv, prefixes, live=live))
        else:
            out.append(render_files(step, prefixes, live))
        out.append("")
    out += [f"# {comment(f)}" if f else "#" for f in footer]
    return redact("\n".join(out).rstrip("\n") + "\n")
