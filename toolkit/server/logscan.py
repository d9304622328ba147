"""Reading tritonserver logs: the last lines, and Triton's own reasons for a failed start."""

from __future__ import annotations

import os
import re
from pathlib import Path

TAIL_LINES = 50

# Triton log lines that say why a model or the server did not come up, with the group to keep.
_PATTERNS = [
    re.compile(r"(failed to load '[^']+'(?: version \d+)?: .*)"),
    re.compile(r"(Poll failed for model directory '[^']+': .*)"),
    re.compile(r"(Error parsing text-format [\w.]+: .*)"),
    re.compile(r"(failed to start \w+ service: .*)"),
    re.compile(r"(error: creating server: .*)"),
    re.compile(r"\|\s*(\S+\s*\|\s*\d+\s*\|\s*UNAVAILABLE: .*?)\s*\|\s*$"),
    re.compile(r"(Unable to find backend library for backend '[^']+'.*)"),
    re.compile(r"(unable to load shared library: .*)"),
    re.compile(r"(unrecognized option '[^']*')"),
    re.compile(r"(error while loading shared libraries: .*)"),
    re.compile(r"^(bash: .*)$"),
]
# The Python backend starts each stub with `bash -c "exec <stub> <model.py> ..."`, paths unquoted
# (python_backend src/stub_launcher.cc): a path bash splits or cannot run shows up as a `bash:`
# line, and Triton then waits for that stub until its own timeout.
_STUB_LAUNCH = re.compile(r"^bash: (?:line \d+: )?(.*)$", re.M)


def stub_launch_failures(text: str) -> list[str]:
    """What bash said when it could not start a Python backend stub, deduplicated."""
    return list(dict.fromkeys(m.group(0).strip() for m in _STUB_LAUNCH.finditer(text)))


# Triton's Python backend logs each instance it starts initializing, and each model it loaded;
# sdtk's models write INITIALIZED (toolkit/serving/triton.py) when their initialize() returned.
_INSTANCE_STARTED = re.compile(r"TRITONBACKEND_ModelInstanceInitialize: (\S+?)_\d+_\d+ ")
_INSTANCE_DONE = re.compile(r"^sdtk-serving: initialized instance '(\S+?)_\d+_\d+'", re.M)
_MODEL_LOADED = re.compile(r"successfully loaded '([^']+)'")


def initialized_not_loaded(text: str) -> dict[str, int]:
    """Models whose every started instance said it was initialized but that Triton has not
    reported loaded: {model: instances}. Such a model is loaded within milliseconds, unless the
    stub's handshake was lost."""
    started: dict[str, int] = {}
    for m in _INSTANCE_STARTED.finditer(text):
        started[m.group(1)] = started.get(m.group(1), 0) + 1
    done: dict[str, int] = {}
    for m in _INSTANCE_DONE.finditer(text):
        done[m.group(1)] = done.get(m.group(1), 0) + 1
    loaded = {m.group(1) for m in _MODEL_LOADED.finditer(text)}
    return {name: n for name, n in started.items() if name not in loaded and done.get(name, 0) >= n}


def tail(path: Path | str | None, lines: int = TAIL_LINES, max_bytes: int = 1 << 20) -> str:
    """The last `lines` lines of a (possibly large) text file; "" if it cannot be read."""
    if path is None:
        return ""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return ""
    text = data.decode(errors="replace")
    out = text.splitlines()[-lines:]
    return "\n".join(out) + ("\n" if out else "")


def _clean(msg: str) -> str:
    # Triton quotes messages and escapes newlines: keep the first line, drop the quote.
    msg = msg.replace("\\n", "\n").split("\n", 1)[0].strip()
    msg = msg.rstrip('"').strip()
    return re.sub(r"\s*\|\s*", " | ", msg) if msg.count("|") >= 2 else msg


def startup_errors(text: str, limit: int = 8) -> list[str]:
    """Triton's own error messages about models that failed to load or services that failed
    to start ("failed to load 'ensemble' version 1: ...", "UNAVAILABLE: ...", "Socket ... in
    use"), deduplicated, in log order.
    """
    out: list[str] = []
    seen: set[str] = set()
    for line in text.splitlines():
        for pat in _PATTERNS:
            m = pat.search(line)
            if not m:
                continue
            msg = _clean(m.group(1))
            # The model table repeats what "failed to load" already said.
            key = msg.split(": ", 1)[-1] if "UNAVAILABLE" in msg else msg
            if key in seen or any(key in s for s in seen):
                break
            seen.add(key)
            out.append(msg)
            break
    return out[:limit]


def startup_errors_in(path: Path | str | None) -> list[str]:
    if path is None:
        return []
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return []
    return startup_errors(text)


def port_conflict(text: str) -> bool:
    return "already in use" in text
