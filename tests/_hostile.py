"""Shared by the script-injection tests: a hostile-string corpus and recording stub commands.

Every string is a valid single path component (no '/' and no NUL), so it can name a directory
that a model path, a workdir or a mount point runs through.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

CORPUS: dict[str, str] = {
    "newline": "new\nline",
    "eof-line": "x\nEOF\ntouch PWNED_EOF\nEOF",
    "ranks-line": "x\nRANKS\ntouch PWNED_RANKS\nRANKS",
    "comment-break": "x\n# c\ntouch PWNED_COMMENT #",
    "single-quote": "it's 'q'",
    "double-quote": 'dq"uote"',
    "command-sub": "$(touch PWNED_SUB)",
    "backticks": "`touch PWNED_BT`",
    "variable": "${HOME}and$PATH",
    "semicolon": "a;touch PWNED_SEMI;b",
    "ampersand-pipe": "a && touch PWNED_AND | cat",
    "glob": "glob*?[ab]{c,d}",
    "backslash": "back\\slash\\",
    "tab-cr-esc": "tab\there\rcr\x1besc",
    "leading-dash": "-rf --help",
    "spaces": "  spaced  out  ",
    "hash": "#not-a-comment",
    "unicode-lookalikes": "ｔａｒｇｅｔ∕ｅｏｆ\u2028ＥＯＦ\u200b",
    "long": "L" * 200,
}

CONTROL_FREE = {k: v for k, v in CORPUS.items() if not any(ord(c) < 32 or c in "\u2028\u2029" for c in v)}


def make_stubs(bin_dir: Path, log_dir: Path, names: list[str]) -> Path:
    """Executables that record their argv (one JSON file per call, in call order) and succeed."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    log_dir.mkdir(parents=True, exist_ok=True)
    for name in names:
        p = bin_dir / name
        p.write_text(
            f"#!{sys.executable} -S\n"
            "import json, os, sys, time\n"
            f"d = {str(log_dir)!r}\n"
            "name = f'{time.time_ns():020d}-{os.getpid()}.json'  # unique: calls may run in parallel\n"
            "with open(os.path.join(d, name), 'x') as f:\n"
            "    json.dump({'cmd': os.path.basename(sys.argv[0]), 'exe': sys.argv[0], 'argv': sys.argv[1:]}, f)\n",
            encoding="utf-8",
        )
        p.chmod(p.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return bin_dir


def calls(log_dir: Path) -> list[dict]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(log_dir.glob("*.json"))]


def tree(root: Path) -> set[str]:
    """Every path under root (files, dirs, links), not following links."""
    out = set()
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            out.add(os.path.join(dirpath, n))
    return out


def run_script(script: Path, *, cwd: Path, stub_bin: Path, env: dict[str, str] | None = None,
               timeout: float = 60) -> subprocess.CompletedProcess:  # fmt: skip
    """bash SCRIPT with only the stubs and the system tools on PATH, in its own process group,
    which is killed afterwards (scripts may leave background loops such as a lock heartbeat)."""
    base = {"PATH": f"{stub_bin}:/usr/bin:/bin", "HOME": str(cwd), "LANG": "C.UTF-8"}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            ["bash", str(script)], cwd=cwd, env={**base, **(env or {})}, stdout=out, stderr=err,
            stdin=subprocess.DEVNULL, start_new_session=True, text=True,
        )  # fmt: skip
        try:
            rc = proc.wait(timeout=timeout)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(proc.args, rc, out.read(), err.read())


def value_after(argv: list[str], flag: str) -> str:
    """The value of `--flag value` or `--flag=value` in argv."""
    for i, a in enumerate(argv):
        if a == flag:
            return argv[i + 1]
        if a.startswith(flag + "="):
            return a[len(flag) + 1 :]
    raise AssertionError(f"{flag} not in {argv}")


def created_outside(before: set[str], after: set[str], allowed: list[Path]) -> list[str]:
    roots = [str(a) + os.sep for a in allowed]
    return sorted(p for p in after - before if not any((p + os.sep).startswith(r) for r in roots))
