"""What a deployment is asked for (`DeployOptions`) and what it gives back (`DeployResult`), and
where it lives: `<workdir>/<recipe name>/` with the recipe it deployed (`recipe.json`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit.recipe import Recipe
from toolkit.server.workdir import DEFAULT_WORKDIR

TARGETS = ("local", "k8s", "slurm", "dynamo")
RECIPE_FILE = "recipe.json"


@dataclass(frozen=True)
class DeployOptions:
    """How to deploy a recipe (`toolkit.deploy.deploy`); the CLI's flags, one field each.

    Every target: `target` (TARGETS), `backend` (overrides the recipe's), `workdir` (deployments
    live under `<workdir>/<recipe name>/`).

    local: `render_only` (build and render, launch nothing), `detach` (return with the server
    running), `auto_ports`, `tritonserver` (the binary), `validate`, `ready_timeout`, `burst` (the
    post-validation burst), `on_failure` (toolkit.server.policies.POLICIES: when a Python backend
    stub or the server dies; None: `stop` in the foreground, `none` detached: no watchdog).

    k8s / slurm: the manifests (toolkit.ops.k8s: `namespace`, `image`, `replicas`) or the sbatch
    script (toolkit.ops.slurm: `image` runs the ranks in a container, `workdir` is where the nodes
    find the repository), written under `out`.

    dynamo: Dynamo's frontend and `workers` workers behind `router_mode` (toolkit.dynamo.launch;
    `on_failure` None: `restart` detached, `stop` in the foreground). k8s with `engine="dynamo"`: a
    DynamoGraphDeployment (toolkit.dynamo.k8s): `workers` worker replicas, or with `disagg`
    `prefill_workers` prefill and `workers` decode replicas.
    """

    target: str = "local"
    backend: str | None = None
    workdir: Path | None = None
    # local
    render_only: bool = False
    detach: bool = False
    auto_ports: bool = False
    tritonserver: str | None = None
    validate: bool = True
    ready_timeout: float = 600.0
    on_failure: str | None = None
    burst: bool = True
    # k8s / slurm
    out: Path | None = None
    namespace: str = "default"
    image: str | None = None
    replicas: int = 1
    # dynamo
    workers: int = 1
    router_mode: str | None = None  # None: the recipe's serving.dynamo.router_mode
    engine: str = "triton"
    disagg: bool = False
    prefill_workers: int = 1


def deployment_dir(recipe: Recipe, workdir: Path | None) -> Path:
    return (workdir or DEFAULT_WORKDIR).resolve() / recipe.display_name


@dataclass
class DeployResult:
    recipe: str
    backend: str
    mode: str
    workdir: Path
    model_repo: Path
    model: str
    entry_kind: str
    decoupled: bool
    pid: int | None = None
    http_url: str | None = None
    grpc_url: str | None = None
    metrics_url: str | None = None
    command: list[str] = field(default_factory=list)
    validation: dict[str, Any] | None = None
    ready_seconds: float | None = None
    watchdog_pid: int | None = None  # a detached deploy's watchdog (toolkit.server.watchdog)
    target: str = "local"  # local | k8s | slurm (TARGETS)
    files: list[Path] = field(default_factory=list)  # k8s / slurm: what was written, to apply or submit
    # Where the target's weights came from when they are not the checkpoint's own (a GGUF's
    # dequantized conversion: toolkit.hub.gguf's provenance note); None otherwise.
    weights: str | None = None

    @property
    def model_name(self) -> str:
        return self.model

    def to_dict(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "http_url": self.http_url,
            "grpc_url": self.grpc_url,
            "metrics_url": self.metrics_url,
            "model": self.model,
            "model_repo": str(self.model_repo),
            "workdir": str(self.workdir),
            "recipe": self.recipe,
            "backend": self.backend,
            "mode": self.mode,
            "entry_kind": self.entry_kind,
            "decoupled": self.decoupled,
            "command": self.command,
            "ready_seconds": self.ready_seconds,
            "validation": self.validation,
            "watchdog_pid": self.watchdog_pid,
            "weights": self.weights,
        } | ({"target": self.target, "files": [str(p) for p in self.files]} if self.target != "local" else {})


def save_recipe(recipe: Recipe, root: Path) -> None:
    """The deployed recipe, overrides applied, so that `sdtk validate --workdir` can find it."""
    from toolkit._fs import atomic_write

    data = {
        "source": str(recipe.source_path) if recipe.source_path else None,
        "recipe": recipe.model_dump(mode="json"),
    }
    atomic_write(root / RECIPE_FILE, json.dumps(data, indent=2))


def load_deployed_recipe(root: Path) -> Recipe | None:
    from toolkit.recipe import parse_recipe

    path = root / RECIPE_FILE
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    return parse_recipe(data["recipe"], path=Path(data["source"]) if data.get("source") else None)


def find_deployment(workdir: Path | None) -> Path:
    """The deployment directory for --workdir (toolkit.server.state.find_deployment)."""
    from toolkit.server.state import find_deployment as resolve

    return resolve(workdir, default=DEFAULT_WORKDIR)
