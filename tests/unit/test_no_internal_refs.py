"""The product cites what a reader can open: no internal issue numbers, no files outside the repository.

A reader of the README, the docs, the code, the recipes or the tests cannot resolve the project's
own tracker numbers, nor a path on the machine the project was built on: say what the thing is,
and cite upstream facts by repository, path and commit. Upstream issues keep their numbers when
the repository is named right before them: "triton-inference-server/server issue #8805",
"tensorrtllm_backend issue #221", "vllm-project/vllm issue #123". This is the check
`git grep -niE "issues? #?[0-9]+"` over the same paths, with those citations allowed.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCOPE = ("README.md", "docs", "toolkit", "tests", "scripts", "model_repo_templates", "recipes")

# "issue" or "issues" in any case, then a number, with or without '#'.
ISSUE = re.compile(r"\bissues? #?\d+", re.IGNORECASE)
# The repository named right before "issue" (on the same line or the one before): owner/name, or
# one of the upstream repositories the docs name alone.
UPSTREAM_BEFORE = re.compile(
    r"([\w.-]+/[\w.-]+|server|core|python_backend|tensorrtllm_backend|TensorRT-LLM|TRT-LLM|vLLM|SGLang)"
    r"\s+$"
)
# Spelled in parts so that this file does not match itself: the upstream fact files beside the
# repository, and any absolute path under the build machine's /work.
OUTSIDE = re.compile("shared" + "/reference" + r"|(?<![\w.~])/work" + "/")
# tests/contracts/test_containers.py reads upstream git mirrors when the machine has them (and
# skips that check when not): the one place a test may name a path outside the repository.
MIRRORS_IN_TESTS = "/work" + "/.mirror/"


def _files() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", *SCOPE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [ROOT / line for line in out.splitlines() if (ROOT / line).is_file()]


def _texts():
    for path in _files():
        try:
            yield path.relative_to(ROOT), path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary data (weights, images)


def internal_issues(text: str) -> list[int]:
    """Line numbers (1-based) of the issue numbers in `text` that name no upstream repository."""
    return [
        text.count("\n", 0, m.start()) + 1
        for m in ISSUE.finditer(text)
        if not UPSTREAM_BEFORE.search(text[max(0, m.start() - 200) : m.start()])
    ]


def outside_paths(rel: Path, line: str) -> bool:
    if rel.parts[0] == "tests":
        line = line.replace(MIRRORS_IN_TESTS, "")
    return OUTSIDE.search(line) is not None


def test_no_internal_issue_numbers():
    hits = []
    for rel, text in _texts():
        lines = text.splitlines()
        hits += [f"{rel}:{n}: {lines[n - 1].strip()[:160]}" for n in internal_issues(text)]
    assert not hits, "internal issue numbers (say what the thing is):\n" + "\n".join(hits)


def test_no_references_to_files_outside_the_repository():
    hits = [
        f"{rel}:{n}: {line.strip()[:160]}"
        for rel, text in _texts()
        for n, line in enumerate(text.splitlines(), 1)
        if outside_paths(rel, line)
    ]
    assert not hits, "files outside the repository (cite upstream: repo, path, commit):\n" + "\n".join(hits)


def test_the_scope_holds_the_docs_scripts_and_recipes():
    names = {str(rel) for rel, _ in _texts()}
    assert {"README.md", "docs/benchmarks.md", "scripts/demo.sh", "recipes/tiny-ngram.yaml"} <= names


def test_the_patterns_catch_what_they_are_for():
    # f-strings, so that `git grep -E "issue [0-9]+"` does not find these examples
    assert internal_issues(f"the checkout before issue {27}") == [1]
    assert internal_issues(f"(Issue {22}, finding 4)") == [1]
    assert internal_issues(f"ISSUES {5} and 6") == [1]
    assert internal_issues(f"fixed in\nissue #{4}") == [2]
    assert internal_issues(f"upstream's default, issue #{276}") == [1]
    assert not internal_issues("server issue #8805 (2026-05-29, open)")
    assert not internal_issues("tensorrtllm_backend issue #221; PR #10860")
    assert not internal_issues(f"vllm-project/vllm issue {8439}")
    assert not internal_issues(f"(triton-inference-server/server\n    issue #{8805}): the fix")
    assert not internal_issues("no issue here, 27 tokens")
    assert outside_paths(Path("docs/x.md"), "--keep " + "/work" + "/scratch/m64")
    assert outside_paths(Path("scripts/x.py"), "shared" + "/reference/trtllm.md")
    assert outside_paths(Path("docs/x.md"), "/work" + "/.mirror/server")
    assert not outside_paths(
        Path("tests/contracts/x.py"), "/work" + "/.mirror/triton-inference-server+server"
    )
    assert not outside_paths(Path("docs/x.md"), "workdir/demo and ./work/ are the repository's")
