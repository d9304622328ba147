"""The pod templates of a deployment: the prepare init container, the `triton` container with its
probes, and the optional HTTP proxy and monitor sidecars (leader pods only)."""

from __future__ import annotations

import math
from typing import Any

from toolkit.ops.k8s.context import Context
from toolkit.ops.k8s.options import HTTP_PROXY_PORT, MONITOR_PORT, SCRIPTS_MOUNT, K8sOptions


def template(ctx: Context, role: str, extra_labels: dict[str, str]) -> dict:
    return {
        "metadata": {"labels": {**ctx.labels, "app.kubernetes.io/component": role, **extra_labels}},
        "spec": pod_spec(ctx, role),
    }


def _resources(n: int) -> dict:
    if not n:
        return {}
    return {"limits": {"nvidia.com/gpu": n}, "requests": {"nvidia.com/gpu": n}}


def env_common(opts: K8sOptions, models_mount: str) -> list[dict[str, Any]]:
    """The env of every container of every pod (one list: the YAML shares it)."""
    env: list[dict[str, Any]] = [
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "HF_HOME", "value": f"{models_mount}/.cache/huggingface"},
    ]
    if opts.hf_token_secret:
        env.append(
            {
                "name": "HF_TOKEN",
                "valueFrom": {
                    "secretKeyRef": {"name": opts.hf_token_secret, "key": "token", "optional": True}
                },
            }
        )
    return env


def mounts(models_mount: str) -> list[dict[str, Any]]:
    return [
        {"name": "models", "mountPath": models_mount},
        {"name": "sdtk", "mountPath": SCRIPTS_MOUNT},
    ]


def volumes(name: str, opts: K8sOptions) -> list[dict[str, Any]]:
    return [
        {"name": "models", "persistentVolumeClaim": {"claimName": f"{name}-models"}},
        {"name": "sdtk", "configMap": {"name": f"{name}-sdtk", "defaultMode": 0o755}},
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": opts.shm_size}},
    ]


def pod_spec(ctx: Context, role: str) -> dict:
    env, mnt = [*ctx.env_common, {"name": "SDTK_ROLE", "value": role}], ctx.mounts
    serving = role == "leader"
    gpus = ctx.topo.gpus_in_node
    init: dict[str, Any] = {
        "name": "prepare",
        "image": ctx.image,
        "command": ["/bin/bash", f"{SCRIPTS_MOUNT}/prepare.sh"],
        "env": env,
        "volumeMounts": mnt,
    }
    # Building engines needs the GPUs; waiting for them does not.
    if serving and ctx.opts.prepare == "build":
        init["resources"] = _resources(gpus)
    container: dict[str, Any] = {
        "name": "triton",
        "image": ctx.image,
        "command": ["/bin/bash", f"{SCRIPTS_MOUNT}/launch.sh"],
        "env": env,
        "resources": _resources(gpus),
        "volumeMounts": [*mnt, {"name": "dshm", "mountPath": "/dev/shm"}],
    }
    containers = [container]
    if serving:
        container.update(_serving(ctx))
        if ctx.opts.http_proxy:
            containers.append(_http_proxy(ctx))
        if ctx.opts.monitor_sidecar:
            containers.append(_monitor(ctx))
    spec: dict[str, Any] = {
        "initContainers": [init],
        "containers": containers,
        "volumes": ctx.volumes,
        "terminationGracePeriodSeconds": 60,
    }
    if ctx.topo.multi_node:
        spec["serviceAccountName"] = ctx.name
    return spec


def _serving(ctx: Context) -> dict[str, Any]:
    """The leader's `triton` container: ports and probes."""
    http = ctx.recipe.serving.http_port
    return {
        "ports": [{"name": k, "containerPort": v, "protocol": "TCP"} for k, v in ctx.ports.items()],
        "startupProbe": {
            "httpGet": {"path": "/v2/health/ready", "port": http},
            "periodSeconds": 10,
            "timeoutSeconds": 5,
            "failureThreshold": max(1, math.ceil(ctx.opts.startup_timeout_s / 10)),
        },
        "readinessProbe": {
            "httpGet": {"path": "/v2/health/ready", "port": http},
            "periodSeconds": 10,
            "timeoutSeconds": 5,
            "failureThreshold": 3,
        },
        # /v2/health/* stays 200 when a Python backend stub dies (server#8604): the probe
        # runs `sdtk status`'s stub check, and asks Triton's live endpoint too.
        "livenessProbe": {
            "exec": {
                "command": [
                    "python3",
                    f"{SCRIPTS_MOUNT}/stubcheck.py",
                    ctx.repo,
                    "--url",
                    f"http://127.0.0.1:{http}",
                ]
            },
            "periodSeconds": 15,
            "timeoutSeconds": 10,
            "failureThreshold": 4,
        },
    }


def _http_proxy(ctx: Context) -> dict[str, Any]:
    return {
        "name": "http-proxy",
        "image": ctx.opts.http_proxy_image,
        "command": ["nginx", "-c", f"{SCRIPTS_MOUNT}/nginx.conf"],
        "ports": [{"name": "http-proxy", "containerPort": HTTP_PROXY_PORT, "protocol": "TCP"}],
        "readinessProbe": {
            "httpGet": {"path": "/v2/health/ready", "port": HTTP_PROXY_PORT},
            "periodSeconds": 10,
            "timeoutSeconds": 5,
            "failureThreshold": 3,
        },
        "volumeMounts": [{"name": "sdtk", "mountPath": SCRIPTS_MOUNT, "readOnly": True}],
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
    }


def _monitor(ctx: Context) -> dict[str, Any]:
    sv, spec = ctx.recipe.serving, ctx.recipe.speculative
    return {
        "name": "sdtk-monitor",
        "image": ctx.image,
        "command": [
            "sdtk",
            "monitor",
            "--url",
            f"http://127.0.0.1:{sv.http_port}",
            "--model",
            sv.model_name,
            "--port",
            str(MONITOR_PORT),
            "--interval",
            "15",
            *(["--draft-len", str(spec.draft_len)] if spec.draft_len else []),
        ],
        "ports": [{"name": "sdtk-metrics", "containerPort": MONITOR_PORT, "protocol": "TCP"}],
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
    }
