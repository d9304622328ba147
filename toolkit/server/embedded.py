"""Running the CPU tritonserver (2.51, Python backend) embedded in the nvidia-pytriton wheel.

The wheel ships the server and one Python backend stub per Python minor version, but not laid
out to run as-is. Per server workdir we:

- copy `backends/python` to a private `<workdir>/triton_backends/python/` and put the stub for
  *this* interpreter's minor version next to it (`--backend-directory` points there);
- set LD_LIBRARY_PATH to this interpreter's LIBDIR (else the stub loads the wrong libpython),
  plus the wheel's `nvidia_pytriton.libs` (a copied stub loses its RPATH), plus what was there;
- put the venv's `bin` first in PATH so that the stub's Python sees the venv's packages.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from toolkit._fs import atomic_path
from toolkit.errors import ServerError
from toolkit.server.discover import pytriton_root

STUB = "triton_python_backend_stub"


@dataclass(frozen=True)
class EmbeddedSetup:
    backend_dir: Path  # pass as --backend-directory
    env: dict[str, str]  # the full environment to launch tritonserver with


def is_embedded(binary: Path | str | None, root: Path | None = None) -> bool:
    """Is `binary` the tritonserver inside the nvidia-pytriton wheel?"""
    if binary is None:
        return False
    root = root or pytriton_root()
    if root is None:
        return False
    try:
        return Path(binary).resolve().is_relative_to(root.resolve())
    except OSError:
        return False


def _prepend(value: str | None, *parts: str) -> str:
    items = [p for p in parts if p]
    if value:
        items += [p for p in value.split(os.pathsep) if p and p not in items]
    return os.pathsep.join(items)


def embedded_env(base: Mapping[str, str] | None = None, root: Path | None = None) -> dict[str, str]:
    """`base` (default: os.environ) with LD_LIBRARY_PATH and PATH set for the embedded server."""
    env = dict(os.environ if base is None else base)
    root = root or pytriton_root()
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    wheel_libs = str(root.parent.parent / "nvidia_pytriton.libs") if root else ""
    env["LD_LIBRARY_PATH"] = _prepend(env.get("LD_LIBRARY_PATH"), libdir, wheel_libs)
    env["PATH"] = _prepend(env.get("PATH"), os.path.dirname(sys.executable))
    return env


def _copy_if_changed(src: Path, dst: Path) -> None:
    """Copy `src` over `dst` unless they already match; never truncate a file in use."""
    try:
        s, d = src.stat(), dst.stat()
        if s.st_size == d.st_size and int(s.st_mtime) == int(d.st_mtime):
            return
    except FileNotFoundError:
        pass
    # A rename: a running server keeps its mapping of the old inode.
    with atomic_path(dst) as tmp:
        shutil.copy2(src, tmp)


def prepare_embedded(
    workdir: Path, base_env: Mapping[str, str] | None = None, root: Path | None = None
) -> EmbeddedSetup:
    """Lay out `<workdir>/triton_backends/python/` with the right stub; return flags and env."""
    root = root or pytriton_root()
    if root is None:
        raise ServerError(
            "the embedded tritonserver (nvidia-pytriton) is not installed",
            hint="pip install 'sdtk[server]', or pass --tritonserver",
        )
    minor = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = root / "python_backend_stubs" / minor / STUB
    if not stub.is_file():
        have = sorted(p.name for p in (root / "python_backend_stubs").glob("*") if p.is_dir())
        raise ServerError(
            f"nvidia-pytriton has no Python backend stub for Python {minor} (it has: {', '.join(have)})",
            hint="run sdtk from a Python version the wheel supports, or use an NGC tritonserver",
        )
    src = root / "backends" / "python"
    backend_dir = workdir / "triton_backends"
    dst = backend_dir / "python"
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file():
            _copy_if_changed(f, dst / f.name)
    _copy_if_changed(stub, dst / STUB)
    os.chmod(dst / STUB, 0o755)
    return EmbeddedSetup(backend_dir=backend_dir, env=embedded_env(base_env, root))
