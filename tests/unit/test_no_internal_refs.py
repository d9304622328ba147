"""The product cites what a reader can open: no internal issue numbers, no files outside the repository.

A reader of the README, the docs, the code or the tests cannot resolve the project's own tracker
numbers, nor a path on the machine the project was built on: say what the thing is, and cite
upstream facts by repository, path and commit. Upstream issues keep their numbers: "server issue
#8805", "PR #10860", "vllm-project/vllm issue 123" name a repository (or use '#').
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCOPE = ("README.md", "docs", "toolkit", "tests", "scripts", "model_repo_templates")

# A bare number after "issue" or "issues" (this tracker's); "issue #221" is upstream.
ISSUE = re.compile(r"\b[Ii]ssues? (\d+)")
# A repository named right before "issue": owner/name, or one the docs name alone.
UPSTREAM_BEFORE = re.compile(
    r"([\w.-]+/[\w.-]+|server|core|python_backend|tensorrtllm_backend|TensorRT-LLM|TRT-LLM|vLLM|SGLang)\s+$"
)
# Spelled in two parts so that this file does not match itself.
OUTSIDE = ("shared" + "/reference", "/work/" + "shared")


def _files() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", *SCOPE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [ROOT / line for line in out.splitlines() if (ROOT / line).is_file()]


def _hits(predicate) -> list[str]:
    found = []
    for path in _files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary data (weights, images)
        for n, line in enumerate(text.splitlines(), 1):
            if predicate(line):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:160]}")
    return found


def _internal_issue(line: str) -> bool:
    return any(not UPSTREAM_BEFORE.search(line[: m.start()]) for m in ISSUE.finditer(line))


def test_no_internal_issue_numbers():
    hits = _hits(_internal_issue)
    assert not hits, "internal issue numbers (say what the thing is):\n" + "\n".join(hits)


def test_no_references_to_files_outside_the_repository():
    hits = _hits(lambda line: any(s in line for s in OUTSIDE))
    assert not hits, "files outside the repository (cite upstream: repo, path, commit):\n" + "\n".join(hits)


def test_the_patterns_catch_what_they_are_for():
    # f-strings, so that `git grep -E "issue [0-9]+"` does not find these examples
    assert _internal_issue(f"the checkout before issue {27}")
    assert _internal_issue(f"(Issue {22}, finding 4)")
    assert not _internal_issue("server issue #8805 (2026-05-29, open)")
    assert not _internal_issue("tensorrtllm_backend issue #221; PR #10860")
    assert not _internal_issue(f"vllm-project/vllm issue {8439}")
    assert not _internal_issue("no issue here, 27 tokens")
