"""The core objects of a deployment by kind: RBAC (multi-node), ConfigMap, PersistentVolumeClaim,
Service, and the workload (Deployment, LeaderWorkerSet, or a StatefulSet pair), plus the HPA and the
ServiceMonitor that scale and watch it."""

from __future__ import annotations

from typing import Any

from toolkit.ops.k8s.context import Context
from toolkit.ops.k8s.options import MONITOR_PORT
from toolkit.ops.k8s.pods import template


def rbac(ctx: Context) -> list[dict]:
    """kubectl exec from the leader's mpirun into the worker pods (multi-node)."""
    name = ctx.name
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": ctx.meta(name)},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": ctx.meta(name),
            "rules": [
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
                {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": ctx.meta(name),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ctx.opts.namespace}],
        },
    ]


def config_map(ctx: Context, files: dict[str, str]) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": ctx.meta(f"{ctx.name}-sdtk"), "data": files}


def volume_claim(ctx: Context, access_mode: str) -> dict:
    spec: dict[str, Any] = {
        "accessModes": [access_mode],
        "resources": {"requests": {"storage": ctx.opts.storage_size}},
    }
    if ctx.opts.storage_class:
        spec["storageClassName"] = ctx.opts.storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": ctx.meta(f"{ctx.name}-models"),
        "spec": spec,
    }


def service(ctx: Context) -> dict:
    # The Service's http port reaches Triton through the proxy sidecar when there is one.
    target = {"http": "http-proxy"} if ctx.opts.http_proxy else {}
    ports = [
        {"name": k, "port": v, "targetPort": target.get(k, k), "protocol": "TCP"}
        for k, v in ctx.ports.items()
    ]
    if ctx.opts.monitor_sidecar:
        ports.append(
            {"name": "sdtk-metrics", "port": MONITOR_PORT, "targetPort": "sdtk-metrics", "protocol": "TCP"}
        )
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": ctx.meta(ctx.name),
        "spec": {"type": "ClusterIP", "selector": ctx.leader_selector(), "ports": ports},
    }


def workload(ctx: Context) -> tuple[list[dict], dict[str, str] | None]:
    """The workload's objects, and the HPA's scale target (None: not scalable as a whole)."""
    name, replicas = ctx.name, ctx.opts.replicas
    if ctx.layout == "deployment":
        obj = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": ctx.meta(name),
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": ctx.leader_selector()},
                # One spare replica's worth of GPUs keeps serving through a rollout; without spare GPUs
                # set maxSurge 0 / maxUnavailable 1 (docs/runbooks/upgrade-and-rollback.md).
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                "template": template(ctx, "leader", {}),
            },
        }
        return [obj], {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}
    if ctx.layout == "leaderworkerset":
        obj = {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "metadata": ctx.meta(name),
            "spec": {
                "replicas": replicas,
                "startupPolicy": "LeaderCreated",
                "rolloutStrategy": {
                    "type": "RollingUpdate",
                    "rollingUpdateConfiguration": {"maxUnavailable": 1, "maxSurge": 0},
                },
                "leaderWorkerTemplate": {
                    "size": ctx.topo.nodes,
                    "restartPolicy": "RecreateGroupOnPodRestart",
                    "leaderTemplate": template(ctx, "leader", {}),
                    "workerTemplate": template(ctx, "worker", {}),
                },
            },
        }
        return [obj], {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": name}
    return _stateful_sets(ctx), None


def _stateful_sets(ctx: Context) -> list[dict]:
    """A leader StatefulSet and a worker StatefulSet behind one headless Service."""
    headless = f"{ctx.name}-pods"
    http = ctx.recipe.serving.http_port
    out: list[dict] = [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": ctx.meta(headless),
            "spec": {
                "clusterIP": "None",
                "publishNotReadyAddresses": True,
                "selector": dict(ctx.labels),
                "ports": [{"name": "http", "port": http, "targetPort": http}],
            },
        }
    ]
    replicas = ctx.opts.replicas
    for role, count in (("leader", replicas), ("worker", replicas * (ctx.topo.nodes - 1))):
        tmpl = template(ctx, role, {})
        out.append(
            {
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "metadata": ctx.meta(f"{ctx.name}-{role}"),
                "spec": {
                    "serviceName": headless,
                    "replicas": count,
                    "podManagementPolicy": "Parallel",
                    "selector": {"matchLabels": tmpl["metadata"]["labels"]},
                    "template": tmpl,
                },
            }
        )
    return out


def autoscaler(ctx: Context, scale_target: dict[str, str], metric: str) -> dict:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": ctx.meta(ctx.name),
        "spec": {
            "scaleTargetRef": scale_target,
            "minReplicas": ctx.opts.replicas,
            "maxReplicas": ctx.opts.max_replicas_or_default,
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": metric},
                        "target": {"type": "AverageValue", "averageValue": ctx.opts.hpa_target},
                    },
                }
            ],
            # Engine load takes minutes: scale up on a sustained queue, down slowly.
            "behavior": {
                "scaleUp": {
                    "stabilizationWindowSeconds": 120,
                    "policies": [{"type": "Pods", "value": 1, "periodSeconds": 300}],
                },
                "scaleDown": {
                    "stabilizationWindowSeconds": 900,
                    "policies": [{"type": "Pods", "value": 1, "periodSeconds": 600}],
                },
            },
        },
    }


def service_monitor(ctx: Context) -> dict:
    endpoints = [{"port": "metrics", "path": "/metrics", "interval": "15s"}]
    if ctx.opts.monitor_sidecar:
        endpoints.append({"port": "sdtk-metrics", "path": "/metrics", "interval": "15s"})
    meta = ctx.meta(ctx.name)
    meta["labels"].update(ctx.opts.servicemonitor_labels or {})
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": meta,
        "spec": {
            "selector": {"matchLabels": dict(ctx.labels)},
            "namespaceSelector": {"matchNames": [ctx.opts.namespace]},
            "endpoints": endpoints,
        },
    }
