"""Which tritonserver sdtk uses, and from where.

Order: `--tritonserver`, `$TRITONSERVER`, PATH, the container's tritonserver
(`/opt/tritonserver/bin/tritonserver` in NGC containers: toolkit/data/containers/), then the CPU
build embedded in the nvidia-pytriton wheel.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from toolkit import containers

NGC_TRITONSERVER = Path(containers.ngc_tritonserver())


@dataclass(frozen=True)
class Candidate:
    source: str  # flag, env, path, ngc, embedded
    path: Path | None
    exists: bool

    @property
    def embedded(self) -> bool:
        return self.source == "embedded"


def pytriton_root() -> Path | None:
    """`site-packages/pytriton/tritonserver` without importing pytriton (which is slow)."""
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations))) / "tritonserver"
    return root if root.is_dir() else None


def _executable(p: Path | None) -> bool:
    return p is not None and p.is_file() and os.access(p, os.X_OK)


def find_tritonserver_candidates(flag: str | None = None) -> list[Candidate]:
    out: list[Candidate] = []
    if flag:
        p = Path(flag).expanduser()
        out.append(Candidate("flag", p, _executable(p)))
    env = os.environ.get("TRITONSERVER")
    if env:
        p = Path(env).expanduser()
        out.append(Candidate("env", p, _executable(p)))
    which = shutil.which("tritonserver")
    out.append(Candidate("path", Path(which) if which else None, which is not None))
    ngc = Path(containers.layout().facts.tritonserver.value)
    out.append(Candidate("ngc", ngc, _executable(ngc)))
    root = pytriton_root()
    emb = root / "bin" / "tritonserver" if root else None
    out.append(Candidate("embedded", emb, _executable(emb)))
    return out


def choose_tritonserver(flag: str | Path | None = None) -> Candidate:
    """The first usable candidate in discovery order; ToolNotFound naming what was searched."""
    from toolkit.errors import ToolNotFound

    cands = find_tritonserver_candidates(str(flag) if flag else None)
    explicit = [c for c in cands if c.source in ("flag", "env")]
    for c in explicit:
        # An explicit choice that does not exist is an error, not something to fall back from.
        if not c.exists:
            what = "--tritonserver" if c.source == "flag" else "$TRITONSERVER"
            raise ToolNotFound(str(c.path), hint=f"{what} does not name an executable tritonserver")
        return c
    for c in cands:
        if c.exists:
            return c
    raise ToolNotFound(
        "tritonserver",
        hint="install the `server` extra (pip install 'sdtk[server]'), use an NGC Triton container, "
        "or pass --tritonserver; searched: " + ", ".join(f"{c.source}={c.path}" for c in cands),
    )
