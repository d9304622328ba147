"""What every builder of a deployment's Kubernetes objects reads (toolkit.ops.k8s.objects):
the recipe, the options, the topology and the names decided once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from toolkit.ops.k8s.options import K8sOptions
from toolkit.ops.layout import Topology

if TYPE_CHECKING:
    from toolkit.recipe import Recipe


@dataclass(frozen=True)
class Context:
    recipe: Recipe
    opts: K8sOptions
    topo: Topology
    image: str
    name: str  # Kubernetes object base name
    recipe_name: str  # the recipe's name (workdir subdirectory)
    labels: dict[str, str]
    ports: dict[str, int]  # http, grpc, metrics
    layout: str  # deployment | leaderworkerset | statefulset
    models_mount: str  # where the models volume is mounted (options.MODELS_MOUNT)
    repo: str  # the model repository inside the pods
    marker: str  # written once the repository is prepared
    # One object each, shared by every pod template (the YAML anchors them): toolkit.ops.k8s.pods.
    env_common: list[dict[str, Any]]
    mounts: list[dict[str, Any]]
    volumes: list[dict[str, Any]]

    def meta(self, obj_name: str) -> dict[str, Any]:
        return {"name": obj_name, "namespace": self.opts.namespace, "labels": dict(self.labels)}

    def leader_selector(self) -> dict[str, str]:
        return {**self.labels, "app.kubernetes.io/component": "leader"}
