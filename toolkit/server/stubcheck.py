"""Is every Python-backend model of a Triton repository served by a live stub?

Triton's health endpoints keep answering 200 after a Python backend stub dies (upstream
server#8604), so the check reads processes: a stub's argv is
`triton_python_backend_stub <repo>/<model>/<version>/model.py ...`, and a model of the
repository whose config says `backend: "python"` with no live (non-zombie) stub is dead.

`sdtk status` uses these functions on the server's process group (toolkit.server.state); the
Kubernetes liveness probe runs this file as a script in the Triton container, which need not
have sdtk installed (toolkit.ops.k8s ships its source in the deployment's ConfigMap):

    python3 stubcheck.py MODEL_REPO [--url http://127.0.0.1:8000]
    # exit 0: every Python model has a stub (and, with --url, Triton answers /v2/health/live);
    # exit 1: names what is dead

Standard library only, and no import of toolkit: the file must run on its own.
"""

from __future__ import annotations

import os
import re
import sys
import urllib.error
import urllib.request
from collections.abc import Iterable
from pathlib import Path

STUB = "triton_python_backend_stub"
_PYTHON_BACKEND = re.compile(r'^\s*backend\s*:\s*"python"', re.M)


def python_models(model_repo: Path | str) -> list[str]:
    """The models of a repository that Triton's Python backend serves (one stub per instance)."""
    out = []
    try:
        configs = sorted(Path(model_repo).glob("*/config.pbtxt"))
    except OSError:
        return []
    for config in configs:
        try:
            if _PYTHON_BACKEND.search(config.read_text(errors="replace")):
                out.append(config.parent.name)
        except OSError:
            continue
    return out


def _argv(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            if f.read().rpartition(b")")[2].split()[0] in (b"Z", b"X"):
                return []  # a killed stub stays a zombie until Triton reaps it
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except (OSError, IndexError):
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def stubs_by_model(pids: Iterable[int], model_repo: Path | str | None = None) -> dict[str, list[int]]:
    """The live Python backend stubs among `pids`, by model name; with `model_repo`, only the
    stubs serving that repository."""
    repo = os.path.realpath(model_repo) if model_repo is not None else None
    out: dict[str, list[int]] = {}
    for pid in pids:
        argv = _argv(pid)
        if len(argv) < 2 or os.path.basename(argv[0]) != STUB:
            continue
        model_dir = os.path.dirname(os.path.dirname(argv[1]))
        if repo is not None and os.path.realpath(os.path.dirname(model_dir)) != repo:
            continue
        out.setdefault(os.path.basename(model_dir), []).append(pid)
    return {model: sorted(p) for model, p in sorted(out.items())}


def without_stub(model_repo: Path | str, live: dict[str, list[int]]) -> list[str]:
    """The Python-backend models of the repository that have no live stub in `live`."""
    return [m for m in python_models(model_repo) if not live.get(m)]


def all_pids() -> list[int]:
    try:
        return [int(e) for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return []


def server_live(url: str, timeout: float = 5.0) -> str | None:
    """None when Triton at `url` answers /v2/health/live with 200, else why not."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/v2/health/live", timeout=timeout) as r:
            return None if r.status == 200 else f"/v2/health/live answered {r.status}"
    except (urllib.error.URLError, OSError) as e:
        return f"/v2/health/live: {e}"


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    url = None
    if len(args) == 3 and args[1] == "--url":
        url = args.pop(2)
        args.pop(1)
    if len(args) != 1:
        print("usage: stubcheck.py MODEL_REPO [--url TRITON_HTTP_URL]", file=sys.stderr)
        return 2
    repo = args[0]
    if url is not None:
        why = server_live(url)
        if why is not None:
            print(f"stubcheck: tritonserver at {url} is not live: {why}")
            return 1
    if not python_models(repo):
        print(f"stubcheck: no Python-backend model in {repo}")
        return 0
    dead = without_stub(repo, stubs_by_model(all_pids(), repo))
    if dead:
        print(
            f"stubcheck: no live Python backend stub for model {', '.join(dead)} of {repo}: its "
            "requests fail while Triton's health endpoints still answer 200 (server#8604)"
        )
        return 1
    print(f"stubcheck: every Python-backend model of {repo} has a live stub")
    return 0


if __name__ == "__main__":
    sys.exit(main())
