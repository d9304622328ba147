"""`sdtk selftest --dry-run`: what the self-test would run inside one container, with every path resolved.

For the container's TensorRT-LLM (toolkit/data/containers/<yy.mm>.json) it plans the same (mode,
backend) pairs `sdtk selftest` runs there, and for each prints the build steps' argv (the
`sdtk build --dry-run` plan) and the tritonserver launch (`sdtk deploy --dry-run`), then resolves
every container path the pair needs against a directory tree (`--container-root DIR`, default `/`):
the Python interpreter (the `/opt/venv-tritonserver` venv from 26.03), the converter scripts,
`tritonserver`, the `tensorrtllm` and `python` backend dirs and the llmapi `model.py`. Nothing is
built, written or launched; the checkpoints are empty stand-in directories.

Every report lists the facts that are unverified for the container. For a container without a facts
file (newer than the newest known) that is every fact: the paths are the newest known container's,
said so, and the report lists what sdtk probes inside the container (under `--container-root`, it
probes that tree now).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from toolkit import containers
from toolkit import progress as prog
from toolkit.build import PreflightFailed, build
from toolkit.deploy import plan_deploy
from toolkit.errors import SdtkError
from toolkit.selftest.checkpoints import ROLES, STAND_IN_CONFIGS
from toolkit.selftest.run import engine_notes, plan_modes, selftest_recipe


@dataclass
class PathCheck:
    what: str
    path: str  # inside the container (as the commands name it)
    host: str  # where it was looked for
    found: bool


@dataclass
class PlanRow:
    mode: str
    backend: str
    steps: list[dict[str, Any]] = field(default_factory=list)  # name, title, argv (or files)
    launch_argv: list[str] = field(default_factory=list)
    paths: list[PathCheck] = field(default_factory=list)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and all(p.found for p in self.paths)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


@dataclass
class DryRun:
    container: str
    image: str
    trtllm_version: str
    layout: str  # why this container, and the root
    root: str
    rows: list[PlanRow]
    known: bool = True  # False: no facts file; every fact assumed or probed
    probed: bool = False
    unverified: dict[str, str] = field(default_factory=dict)  # fact → why
    notes: list[str] = field(default_factory=list)  # the engine path's deprecation or removal

    @property
    def ok(self) -> bool:
        return bool(self.rows) and all(r.ok for r in self.rows)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "container": self.container,
            "image": self.image,
            "trtllm_version": self.trtllm_version,
            "layout": self.layout,
            "root": self.root,
            "known": self.known,
            "probed": self.probed,
            "unverified": dict(self.unverified),
            "notes": list(self.notes),
            "rows": [r.to_dict() for r in self.rows],
        }

    def text(self) -> str:
        import shlex

        out = [f"selftest dry run: {self.image} (TensorRT-LLM {self.trtllm_version}); {self.layout}"]
        out += [f"note: {n}" for n in self.notes]
        if self.known:
            out.append(f"unverified for {self.container}: {', '.join(self.unverified) or 'none'}")
        else:
            out.append(f"UNVERIFIED for {self.container} (no facts file; every fact):")
            out += [f"  {name}: {why}" for name, why in self.unverified.items()]
        out.append("")
        for r in self.rows:
            out.append(f"== {r.mode} ({r.backend}): {'ok' if r.ok else 'FAILED'}")
            for s in r.steps:
                if s.get("argv"):
                    out.append(f"  step {s['name']}: {shlex.join(s['argv'])}")
                else:
                    out.append(f"  step {s['name']}: writes {', '.join(s.get('files', []))}")
            if r.launch_argv:
                out.append(f"  launch: {shlex.join(r.launch_argv)}")
            for p in r.paths:
                where = p.host if p.host == p.path else f"{p.host} (in the container: {p.path})"
                out.append(f"  path {p.what}: {where}: {'found' if p.found else 'MISSING'}")
            if r.error:
                out.append(f"  error: {r.error}")
            out.append("")
        missing = sum(not p.found for r in self.rows for p in r.paths)
        out.append(
            f"{sum(r.ok for r in self.rows)}/{len(self.rows)} plan(s) resolved; "
            f"{missing} path(s) missing under {self.root}"
        )
        return "\n".join(out) + "\n"


def _paths(lay: containers.Layout, backend: str, steps: list[dict[str, Any]]) -> list[PathCheck]:
    f = lay.facts
    wanted: list[tuple[str, str]] = [
        (s["name"], s["argv"][1])
        for s in steps
        if s.get("argv") and s["argv"][0] == "python3" and s["argv"][1].endswith(".py")
    ]
    wanted.insert(0, ("python", f.python.value))
    wanted.append(("tritonserver", f.tritonserver.value))
    wanted.append(("python backend", f.python_backend_dir.value))
    if backend == "engine":
        wanted.append(("tensorrtllm backend", f.tensorrtllm_backend_dir.value))
    if backend == "llmapi":
        wanted.append(("llmapi model.py", f.llmapi_model_py.value))
    out = []
    for what, path in wanted:
        host = lay.host(PurePosixPath(path))
        out.append(PathCheck(what, path, str(host), host.exists()))
    return out


def dry_run(
    *,
    container: str | None = None,
    root: Path | str | None = None,
    modes: list[str] | None = None,
) -> DryRun:
    """Plan the self-test of one container (default: the one toolkit.containers.layout picks) and
    resolve its paths under `root` (default: this machine's /). A container without a facts file is
    planned from assumed facts, every one reported unverified (probed under `root` when given)."""
    lay = containers.layout(container=container, root=root)
    version = lay.facts.trtllm_version.value
    plan = plan_modes(version)
    if modes:
        plan = [(m, b) for m, b in plan if m in modes]
    rows: list[PlanRow] = []
    with tempfile.TemporaryDirectory(prefix="sdtk-selftest-plan-") as tmp:
        ckpts = Path(tmp) / "checkpoints"
        paths = {}
        for role in ROLES:
            (ckpts / role).mkdir(parents=True)
            paths[role] = ckpts / role
        for role, config in STAND_IN_CONFIGS.items():  # what selftest.make_checkpoints writes
            (ckpts / role / "config.json").write_text(json.dumps(config) + "\n", encoding="utf-8")
        work = Path(tmp) / "work"
        for mode, backend in plan:
            row = PlanRow(mode, backend)
            rows.append(row)
            recipe = selftest_recipe(mode, backend, paths, version)
            try:
                try:
                    built = build(recipe, workdir=work, dry_run=True, progress=prog.quiet,
                                  container=lay.container, container_root=root)  # fmt: skip
                except PreflightFailed as e:  # still print the plan; the paths below say what is missing
                    row.error = str(e)
                    built = build(recipe, workdir=work, dry_run=True, progress=prog.quiet,
                                  container=lay.container)  # fmt: skip
                row.steps = [
                    {k: s[k] for k in ("name", "title", "argv", "files") if k in s} for s in built.steps
                ]
                dep = plan_deploy(recipe, workdir=work, container=lay.container)
                row.launch_argv = dep.launch_argv
            except SdtkError as e:
                row.error = str(e)
            row.paths = _paths(lay, backend, row.steps)
    return DryRun(
        container=lay.container,
        image=lay.facts.image,
        trtllm_version=version,
        layout=lay.describe(),
        root=str(lay.host("/")),
        rows=rows,
        known=lay.known,
        probed=lay.probed,
        unverified=lay.unverified(),
        notes=engine_notes(version),
    )
