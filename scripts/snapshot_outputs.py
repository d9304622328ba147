#!/usr/bin/env python3
"""Everything sdtk renders, for every bundled recipe and backend × target, written under OUT so that
two trees can be compared with `diff -r` (a restructuring must leave them byte-identical).

    python scripts/snapshot_outputs.py /tmp/before
    ... change the code ...
    python scripts/snapshot_outputs.py /tmp/after && diff -r /tmp/before /tmp/after

Per recipe (recipes/*.yaml) and per backend the support matrix allows for its mode:
  <recipe>/<backend>/dry-run.sh, dry-run.json   `sdtk deploy --dry-run` (plan_deploy)
  <recipe>/<backend>/repo/                       the rendered repository, RUNBOOK.md included
  <recipe>/<backend>/render.json                 the RenderResult
  <recipe>/<backend>/launch.json                 the local launch: argv and env (NGC tritonserver)
  <recipe>/k8s/, <recipe>/slurm/                 `sdtk deploy --target k8s|slurm`
  <recipe>/k8s-25.06/, <recipe>/slurm-25.06/     the same with the 25.06 image (TensorRT-LLM 0.20: engine path)
Plus the test fixtures' backend × mode matrix (tests/repo/conftest.py make_recipe) as
`matrix-<backend>-<mode>/`. Engines are the tests' stand-ins (config.json only), as in
tests/repo; nothing is built or launched. Work paths are fixed, so the output is deterministic.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
WORK = Path("/tmp/sdtk-snapshot-work")  # fixed: rendered files hold absolute paths
OLD_IMAGE = "nvcr.io/nvidia/tritonserver:25.06-trtllm-python-py3"


def _dump(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def _backends(mode: str) -> list[str]:
    """The backends the support matrix allows for `mode` (toolkit.compat's cells)."""
    from toolkit.compat import matrix

    return [c.backend for c in matrix(mode) if c.supported]


def _local(recipe: Any, backend: str, dest: Path, work: Path) -> None:
    from tests.repo.conftest import engines_for, llmapi_options
    from toolkit.deploy.local import server_for as _server
    from toolkit.repo import render_repository
    from toolkit.server.discover import Candidate

    engines = engines_for(work, recipe, backend)
    r = render_repository(
        recipe,
        engines,
        work / "repo",
        backend=backend,
        llmapi_options=llmapi_options(recipe) if recipe.repository_layout(backend) == "llmapi" else None,
        tokenizer_dir="/models/tokenizer",
    )
    shutil.copytree(r.path, dest / "repo")
    _dump(dest / "render.json", r.to_dict())
    ngc = Candidate("ngc", Path("/opt/tritonserver/bin/tritonserver"), True)
    server = _server(recipe, r, work / "wd", tritonserver=ngc if backend != "reference" else None)
    server.shm_prefix = "sdtk_"
    argv = server.command()
    if backend == "reference":  # the embedded binary's path depends on the venv
        argv = ["<tritonserver>" if a.endswith("tritonserver") else a for a in argv]
    _dump(
        dest / "launch.json",
        {"argv": argv, "env": server.plan.env},
    )


def _one(name: str, recipe: Any, out: Path) -> None:
    from toolkit.deploy import plan_deploy
    from toolkit.ops.k8s import render_k8s
    from toolkit.ops.slurm import render_slurm

    for backend in _backends(recipe.mode):
        dest = out / name / backend
        work = WORK / name / backend
        try:
            plan = plan_deploy(recipe, backend=backend, workdir=WORK / "wd", tritonserver=None)
            dest.mkdir(parents=True, exist_ok=True)
            (dest / "dry-run.sh").write_text(plan.script())
            _dump(dest / "dry-run.json", plan.to_dict())
        except Exception as e:  # noqa: BLE001 - the error text is part of the snapshot
            _dump(dest / "dry-run.error.json", {"type": type(e).__name__, "message": str(e)})
        try:
            _local(recipe, backend, dest, work)
        except Exception as e:  # noqa: BLE001
            _dump(dest / "render.error.json", {"type": type(e).__name__, "message": str(e)})
    for target, fn in (
        ("k8s", lambda d: render_k8s(recipe, out_dir=d, validate=True)),
        ("slurm", lambda d: render_slurm(recipe, out_dir=d, workdir=str(WORK / "wd"))),
        # An older container (TensorRT-LLM 0.20): the engine path, orchestrator mode included.
        ("k8s-25.06", lambda d: render_k8s(recipe, out_dir=d, image=OLD_IMAGE, validate=True)),
        (
            "slurm-25.06",
            lambda d: render_slurm(recipe, out_dir=d, workdir=str(WORK / "wd"), container_image=OLD_IMAGE),
        ),
    ):
        try:
            fn(out / name / target)
        except Exception as e:  # noqa: BLE001
            _dump(out / name / f"{target}.error.json", {"type": type(e).__name__, "message": str(e)})


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(sys.argv[1]).absolute()
    if out.exists():
        shutil.rmtree(out)
    os.chdir(ROOT)
    from tests.repo.conftest import ALL, make_recipe
    from toolkit.recipe import load_recipe

    for path in sorted((ROOT / "recipes").glob("*.yaml")):
        shutil.rmtree(WORK, ignore_errors=True)
        _one(path.stem, load_recipe(str(path.relative_to(ROOT))), out)
    for backend, mode in ALL:
        shutil.rmtree(WORK, ignore_errors=True)
        recipe = make_recipe(backend, mode)
        dest = out / f"matrix-{backend}-{mode}"
        try:
            _local(recipe, backend, dest / backend, WORK / "m")
        except Exception as e:  # noqa: BLE001
            _dump(dest / "render.error.json", {"type": type(e).__name__, "message": str(e)})
    shutil.rmtree(WORK, ignore_errors=True)
    files = sum(1 for p in out.rglob("*") if p.is_file())
    print(f"{files} files under {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
