"""The Kubernetes objects of a recipe: pure functions from (recipe, K8sOptions) to a `K8sPlan`
whose manifests and monitoring objects are dicts (the ConfigMap carries the rendered scripts).
toolkit.ops.k8s.render turns a plan into files; the layout decision is in the package docstring."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import yaml

from toolkit import __version__
from toolkit.errors import UsageError
from toolkit.ops import images
from toolkit.ops.k8s.options import (
    HPA_PENDING,
    HPA_WAITING,
    HTTP_PROXY_PORT,
    MODELS_MOUNT,
    MONITOR_PORT,
    READY_MARKER,
    SCRIPTS_MOUNT,
    K8sOptions,
    k8s_name,
    pull_source,
)
from toolkit.ops.layout import Topology, launch_argv, plan_topology
from toolkit.ops.templating import raw, render, shell_join, var
from toolkit.server.workdir import REPO_SUBDIR

if TYPE_CHECKING:
    from toolkit.recipe import Recipe


@dataclass
class K8sPlan:
    name: str  # Kubernetes object base name
    recipe_name: str  # the recipe's name (workdir subdirectory)
    namespace: str
    image: str
    image_why: str
    topology: Topology
    layout: str  # deployment | leaderworkerset | statefulset
    layout_why: str
    manifests: list[dict] = field(default_factory=list)  # applied with kubectl apply -f <out>
    monitoring: list[dict] = field(default_factory=list)  # CRDs of prometheus-operator
    extras: dict[str, str] = field(default_factory=dict)  # file name -> text (not manifests)
    notes: list[str] = field(default_factory=list)
    hpa_metric: str | None = None
    options: K8sOptions = field(default_factory=K8sOptions)
    access_mode: str = "ReadWriteOnce"  # of the models volume
    dockerfile: bool = False  # the pods need an image built from extras/Dockerfile (sdtk, kubectl)
    metric: str = ""  # the per-pod queue metric prometheus-adapter serves (the HPA's, when rendered)

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "namespace": self.namespace,
            "image": self.image,
            "image_why": self.image_why,
            "layout": self.layout,
            "layout_why": self.layout_why,
            "topology": self.topology.to_dict(),
            "hpa_metric": self.hpa_metric,
            "kinds": [f"{m['kind']}/{m['metadata']['name']}" for m in self.manifests + self.monitoring],
            "notes": list(self.notes),
        }


def build_objects(recipe: Recipe, opts: K8sOptions) -> K8sPlan:
    """Every object of the deployment (no files, no extras): layout, scripts, pods, manifests,
    autoscaling and monitoring, with the notes the decisions produce."""
    namespace, image, replicas = opts.namespace, opts.image, opts.replicas
    max_replicas = opts.max_replicas_or_default
    gpus_per_node, multinode, prepare, pull_from = (
        opts.gpus_per_node,
        opts.multinode,
        opts.prepare,
        opts.pull_from,
    )
    storage_size, storage_class, shm_size = opts.storage_size, opts.storage_class, opts.shm_size
    startup_timeout_s, prepare_timeout_s = opts.startup_timeout_s, opts.prepare_timeout_s
    hpa, hpa_metric, hpa_target = opts.hpa, opts.hpa_metric, opts.hpa_target
    monitor_sidecar, hf_token_secret = opts.monitor_sidecar, opts.hf_token_secret
    servicemonitor_labels = opts.servicemonitor_labels

    # Image and TensorRT-LLM version: an explicit image wins; its tag tells the version when it is
    # an NGC trtllm-python-py3 tag in the verified table.
    if image:
        version = images.trtllm_version_of(image) or recipe.trtllm_version
        image_why = "given with --image" + (f" (carries TensorRT-LLM {version})" if version else "")
    else:
        version = recipe.trtllm_version or images.DEFAULT_TRTLLM
        image = images.image_for(version)
        src = "the recipe's trtllm_version" if recipe.trtllm_version else "sdtk's default"
        image_why = f"NGC container for TensorRT-LLM {version} ({src}); table: {images.SOURCE}"
    topo = plan_topology(recipe, gpus_per_node=gpus_per_node, trtllm_version=version)

    recipe_name = recipe.display_name
    name = k8s_name(recipe_name)
    notes: list[str] = list(topo.notes)
    labels = {
        "app.kubernetes.io/name": "sdtk",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/managed-by": "sdtk",
    }
    sv = recipe.serving
    ports = {"http": sv.http_port, "grpc": sv.grpc_port, "metrics": sv.metrics_port}
    if monitor_sidecar and MONITOR_PORT in ports.values():
        raise UsageError(f"the sdtk monitor sidecar port {MONITOR_PORT} collides with a serving port")
    if opts.http_proxy and HTTP_PROXY_PORT in ports.values():
        raise UsageError(f"the HTTP proxy sidecar port {HTTP_PROXY_PORT} collides with a serving port")

    layout: str
    if topo.multi_node:
        layout = multinode
        layout_why = (
            f"tp×pp = {topo.gpus} GPUs > {gpus_per_node} per node: {topo.nodes} nodes × {topo.gpus_in_node} GPUs "
            f"in one leader-mode MPI world. "
            + (
                "LeaderWorkerSet: whole-group restart (an MPI world cannot survive a lost rank), HPA over whole "
                "groups, upstream TRT-LLM+Triton LWS example; needs the LWS controller."
                if layout == "leaderworkerset"
                else "StatefulSet pair + headless Service (no LWS controller needed); no HPA, no group restart."
            )
        )
    else:
        layout = "deployment"
        layout_why = f"tp×pp = {recipe.parallel.tp * recipe.parallel.pp} fits one node ({gpus_per_node} GPUs): a Deployment"

    shared_volume = topo.multi_node or max_replicas > 1 or (hpa and max_replicas > replicas)
    access_mode = "ReadWriteMany" if shared_volume else "ReadWriteOnce"
    if shared_volume:
        notes.append(
            "the models volume is ReadWriteMany (several pods share it): use a storage class that supports it "
            "(NFS, CephFS, Filestore, EFS, Azure Files)"
            + (f"; given: {storage_class}" if storage_class else "")
        )

    # --- scripts -------------------------------------------------------------------------------
    dest = f"{MODELS_MOUNT}/{recipe_name}"
    repo = f"{dest}/{REPO_SUBDIR}"
    marker = f"{dest}/{READY_MARKER}"
    prep_mode = "build"
    pull: dict[str, str] = {"pull_repo": "", "pull_revision": "", "pull_ref": ""}
    if prepare == "pull":
        prep_mode, pull = pull_source(pull_from)
    elif prepare == "none":
        prep_mode = "none"
    needs_sdtk = prepare == "build" or monitor_sidecar
    recipe_file = f"{SCRIPTS_MOUNT}/recipe.yaml"
    prepare_sh = render(
        "prepare.sh.j2",
        sdtk_version=__version__,
        recipe_name=recipe_name,
        mode=prep_mode,
        image=image,
        root=MODELS_MOUNT,
        dest=dest,
        repo=repo,
        repo_subdir=REPO_SUBDIR,
        marker=marker,
        lock=f"{MODELS_MOUNT}/.{recipe_name}.lock",
        stale_s=300,
        timeout_s=prepare_timeout_s,
        build_cmd=shell_join(["sdtk", "build", recipe_file, "--workdir", MODELS_MOUNT]),
        render_cmd=shell_join(["sdtk", "deploy", recipe_file, "--workdir", MODELS_MOUNT, "--render-only"]),
        **pull,
    )

    mpi_args: list[str] = []
    if topo.multi_node:
        mpi_args = ["--host", var("HOSTLIST"), "--mca", "plm_rsh_agent", f"{SCRIPTS_MOUNT}/kubexec.sh"]
    argv = launch_argv(
        topo,
        model_repo=repo,
        http_port=sv.http_port,
        grpc_port=sv.grpc_port,
        metrics_port=sv.metrics_port,
        mpi_args=mpi_args,
    )
    worker_prefix = f"{name}-worker-"
    launch_sh = render(
        "launch.sh.j2",
        sdtk_version=__version__,
        recipe_name=recipe_name,
        layout_line=f"{layout}; {topo.nodes} node(s), {topo.ranks} rank(s), backend {topo.backend}",
        repo=repo,
        marker=marker,
        env=topo.launch.env,
        multi_node=topo.multi_node,
        layout=layout,
        nodes=topo.nodes,
        worker_prefix=worker_prefix,
        worker_wait_s=900,
        ranks=topo.ranks,
        ranks_per_node=topo.ranks_per_node,
        command=shell_join(argv),
    )
    files = {
        "recipe.yaml": _recipe_yaml(recipe, recipe_name, notes),
        "prepare.sh": prepare_sh,
        "launch.sh": launch_sh,
    }
    if topo.multi_node:
        files["kubexec.sh"] = raw("kubexec.sh")
    # The liveness probe's check, the one `sdtk status` makes (toolkit/server/stubcheck.py).
    files["stubcheck.py"] = _stubcheck_source()
    if opts.http_proxy:
        files["nginx.conf"] = render(
            "nginx.conf.j2",
            sdtk_version=__version__,
            listen_port=HTTP_PROXY_PORT,
            triton_port=sv.http_port,
            max_body=opts.http_proxy_max_body,
        )

    # --- pod templates -------------------------------------------------------------------------
    gpus = topo.gpus_in_node

    def resources(n: int) -> dict:
        if not n:
            return {}
        return {"limits": {"nvidia.com/gpu": n}, "requests": {"nvidia.com/gpu": n}}

    env_common: list[dict[str, Any]] = [
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "HF_HOME", "value": f"{MODELS_MOUNT}/.cache/huggingface"},
    ]
    if hf_token_secret:
        env_common.append(
            {
                "name": "HF_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": hf_token_secret, "key": "token", "optional": True}},
            }
        )
    mounts = [
        {"name": "models", "mountPath": MODELS_MOUNT},
        {"name": "sdtk", "mountPath": SCRIPTS_MOUNT},
    ]
    volumes: list[dict[str, Any]] = [
        {"name": "models", "persistentVolumeClaim": {"claimName": f"{name}-models"}},
        {"name": "sdtk", "configMap": {"name": f"{name}-sdtk", "defaultMode": 0o755}},
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": shm_size}},
    ]

    def pod_spec(role: str) -> dict:
        env = [*env_common, {"name": "SDTK_ROLE", "value": role}]
        serving = role == "leader"
        init: dict[str, Any] = {
            "name": "prepare",
            "image": image,
            "command": ["/bin/bash", f"{SCRIPTS_MOUNT}/prepare.sh"],
            "env": env,
            "volumeMounts": mounts,
        }
        # Building engines needs the GPUs; waiting for them does not.
        if serving and prepare == "build":
            init["resources"] = resources(gpus)
        container: dict[str, Any] = {
            "name": "triton",
            "image": image,
            "command": ["/bin/bash", f"{SCRIPTS_MOUNT}/launch.sh"],
            "env": env,
            "resources": resources(gpus),
            "volumeMounts": [*mounts, {"name": "dshm", "mountPath": "/dev/shm"}],
        }
        if serving:
            container["ports"] = [
                {"name": k, "containerPort": v, "protocol": "TCP"} for k, v in ports.items()
            ]
            http = sv.http_port
            container["startupProbe"] = {
                "httpGet": {"path": "/v2/health/ready", "port": http},
                "periodSeconds": 10,
                "timeoutSeconds": 5,
                "failureThreshold": max(1, math.ceil(startup_timeout_s / 10)),
            }
            container["readinessProbe"] = {
                "httpGet": {"path": "/v2/health/ready", "port": http},
                "periodSeconds": 10,
                "timeoutSeconds": 5,
                "failureThreshold": 3,
            }
            # /v2/health/* stays 200 when a Python backend stub dies (server#8604): the probe
            # runs `sdtk status`'s stub check, and asks Triton's live endpoint too.
            container["livenessProbe"] = {
                "exec": {
                    "command": [
                        "python3",
                        f"{SCRIPTS_MOUNT}/stubcheck.py",
                        repo,
                        "--url",
                        f"http://127.0.0.1:{http}",
                    ]
                },
                "periodSeconds": 15,
                "timeoutSeconds": 10,
                "failureThreshold": 4,
            }
        containers = [container]
        if serving and opts.http_proxy:
            containers.append(
                {
                    "name": "http-proxy",
                    "image": opts.http_proxy_image,
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
            )
        if serving and monitor_sidecar:
            containers.append(
                {
                    "name": "sdtk-monitor",
                    "image": image,
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
                        *(
                            ["--draft-len", str(recipe.speculative.draft_len)]
                            if recipe.speculative.draft_len
                            else []
                        ),
                    ],
                    "ports": [{"name": "sdtk-metrics", "containerPort": MONITOR_PORT, "protocol": "TCP"}],
                    "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
                }
            )
        spec: dict[str, Any] = {
            "initContainers": [init],
            "containers": containers,
            "volumes": volumes,
            "terminationGracePeriodSeconds": 60,
        }
        if topo.multi_node:
            spec["serviceAccountName"] = name
        return spec

    def template(role: str, extra_labels: dict[str, str]) -> dict:
        return {
            "metadata": {"labels": {**labels, "app.kubernetes.io/component": role, **extra_labels}},
            "spec": pod_spec(role),
        }

    def meta(obj_name: str) -> dict[str, Any]:
        return {"name": obj_name, "namespace": namespace, "labels": dict(labels)}

    manifests: list[dict] = []
    if topo.multi_node:
        manifests += [
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(name)},
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": meta(name),
                "rules": [
                    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
                    {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]},
                ],
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": meta(name),
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
            },
        ]
    manifests.append(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": meta(f"{name}-sdtk"),
            "data": files,
        }
    )
    pvc_spec: dict[str, Any] = {
        "accessModes": [access_mode],
        "resources": {"requests": {"storage": storage_size}},
    }
    if storage_class:
        pvc_spec["storageClassName"] = storage_class
    manifests.append(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": meta(f"{name}-models"),
            "spec": pvc_spec,
        }
    )

    leader_selector = {**labels, "app.kubernetes.io/component": "leader"}
    # The Service's http port reaches Triton through the proxy sidecar when there is one.
    target = {"http": "http-proxy"} if opts.http_proxy else {}
    svc_ports = [
        {"name": k, "port": v, "targetPort": target.get(k, k), "protocol": "TCP"} for k, v in ports.items()
    ]
    if monitor_sidecar:
        svc_ports.append(
            {"name": "sdtk-metrics", "port": MONITOR_PORT, "targetPort": "sdtk-metrics", "protocol": "TCP"}
        )
    manifests.append(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": meta(name),
            "spec": {"type": "ClusterIP", "selector": leader_selector, "ports": svc_ports},
        }
    )

    workload: dict[str, Any]
    if layout == "deployment":
        workload = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta(name),
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": leader_selector},
                # One spare replica's worth of GPUs keeps serving through a rollout; without spare GPUs
                # set maxSurge 0 / maxUnavailable 1 (docs/runbooks/upgrade-and-rollback.md).
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                "template": template("leader", {}),
            },
        }
        manifests.append(workload)
        scale_target = {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}
    elif layout == "leaderworkerset":
        workload = {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "metadata": meta(name),
            "spec": {
                "replicas": replicas,
                "startupPolicy": "LeaderCreated",
                "rolloutStrategy": {
                    "type": "RollingUpdate",
                    "rollingUpdateConfiguration": {"maxUnavailable": 1, "maxSurge": 0},
                },
                "leaderWorkerTemplate": {
                    "size": topo.nodes,
                    "restartPolicy": "RecreateGroupOnPodRestart",
                    "leaderTemplate": template("leader", {}),
                    "workerTemplate": template("worker", {}),
                },
            },
        }
        manifests.append(workload)
        scale_target = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": name}
    else:
        headless = f"{name}-pods"
        manifests.append(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": meta(headless),
                "spec": {
                    "clusterIP": "None",
                    "publishNotReadyAddresses": True,
                    "selector": dict(labels),
                    "ports": [{"name": "http", "port": sv.http_port, "targetPort": sv.http_port}],
                },
            }
        )
        for role, count in (("leader", replicas), ("worker", replicas * (topo.nodes - 1))):
            tmpl = template(role, {})
            manifests.append(
                {
                    "apiVersion": "apps/v1",
                    "kind": "StatefulSet",
                    "metadata": meta(f"{name}-{role}"),
                    "spec": {
                        "serviceName": headless,
                        "replicas": count,
                        "podManagementPolicy": "Parallel",
                        "selector": {"matchLabels": tmpl["metadata"]["labels"]},
                        "template": tmpl,
                    },
                }
            )
        scale_target = None
        if hpa:
            notes.append(
                "no HPA for the StatefulSet layout: scaling leaders without their workers breaks groups"
            )

    # --- autoscaling ---------------------------------------------------------------------------
    # The engine and reference backends queue requests inside the model (in-flight batching), where
    # Triton's pending count never sees them; both export nv_trt_llm_request_metrics{waiting}.
    metric = hpa_metric or (HPA_WAITING if topo.backend in ("engine", "reference") else HPA_PENDING)
    rendered_hpa = hpa and scale_target is not None and max_replicas > replicas
    if hpa and scale_target is not None and max_replicas == replicas:
        notes.append(f"no HPA: --max-replicas equals --replicas ({replicas})")
    if rendered_hpa:
        manifests.append(
            {
                "apiVersion": "autoscaling/v2",
                "kind": "HorizontalPodAutoscaler",
                "metadata": meta(name),
                "spec": {
                    "scaleTargetRef": scale_target,
                    "minReplicas": replicas,
                    "maxReplicas": max_replicas,
                    "metrics": [
                        {
                            "type": "Pods",
                            "pods": {
                                "metric": {"name": metric},
                                "target": {"type": "AverageValue", "averageValue": hpa_target},
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
        )

    # --- monitoring ----------------------------------------------------------------------------
    endpoints = [{"port": "metrics", "path": "/metrics", "interval": "15s"}]
    if monitor_sidecar:
        endpoints.append({"port": "sdtk-metrics", "path": "/metrics", "interval": "15s"})
    sm_meta = meta(name)
    sm_meta["labels"].update(servicemonitor_labels or {})
    monitoring = [
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "ServiceMonitor",
            "metadata": sm_meta,
            "spec": {
                "selector": {"matchLabels": dict(labels)},
                "namespaceSelector": {"matchNames": [namespace]},
                "endpoints": endpoints,
            },
        }
    ]

    dockerfile = needs_sdtk or topo.multi_node
    if dockerfile:
        why = []
        if prepare == "build":
            why.append("the prepare init container runs `sdtk build`")
        if monitor_sidecar:
            why.append("the monitor sidecar runs `sdtk monitor`")
        if topo.multi_node:
            why.append("the leader's mpirun needs kubectl")
        if images.trtllm_version_of(image) is not None:
            notes.append(
                f"{image} is a stock NGC image, but {' and '.join(why)}: build extras/Dockerfile, push it, "
                "and re-render with --image"
            )
    if topo.backend == "llmapi":
        notes.append(
            "backend llmapi: tensorrt_llm.LLM loads the checkpoint when Triton starts (hub ids download into "
            f"HF_HOME={MODELS_MOUNT}/.cache/huggingface on the volume); the startup probe allows "
            f"{startup_timeout_s}s"
        )
    if topo.backend == "reference":
        notes.append("backend reference runs on CPU: no GPUs are requested")
    if opts.http_proxy:
        notes.append(
            f"the Service's http port goes through the http-proxy sidecar (nginx, port {HTTP_PROXY_PORT}): "
            f"bodies over {opts.http_proxy_max_body} get 413 and form-encoded bodies 415, since one large "
            "form-encoded body crashes tritonserver (server#5840, libevhtp#118; no Triton release records a "
            "fix). Triton's own HTTP port stays reachable inside the pod network for the kubelet's probes"
        )
    else:
        notes.append(
            "no HTTP proxy (http_proxy=False): one large form-encoded body crashes tritonserver "
            "(server#5840, libevhtp#118); put a proxy or ingress limit in front of the http port"
        )
    if sv.host not in ("0.0.0.0", "::"):
        notes.append(
            f"serving.host {sv.host} is ignored in the pod: Triton binds all interfaces so that the Service and "
            "the kubelet's probes reach it"
        )
    return K8sPlan(
        name=name,
        recipe_name=recipe_name,
        namespace=namespace,
        image=image,
        image_why=image_why,
        topology=topo,
        layout=layout,
        layout_why=layout_why,
        manifests=manifests,
        monitoring=monitoring,
        notes=notes,
        hpa_metric=metric if rendered_hpa else None,
        options=opts,
        access_mode=access_mode,
        dockerfile=dockerfile,
        metric=metric,
    )


def _stubcheck_source() -> str:
    from importlib import resources

    return resources.files("toolkit.server").joinpath("stubcheck.py").read_text(encoding="utf-8")


def _recipe_yaml(recipe: Recipe, recipe_name: str, notes: list[str]) -> str:
    data = recipe.model_dump(mode="json", exclude_none=True)
    data["name"] = recipe_name
    # Local checkpoint paths are relative to the recipe file, which the pod does not have.
    for role, src in (data.get("models") or {}).items():
        if isinstance(src, dict) and src.get("path"):
            local = recipe.local_path(getattr(recipe.models, role))
            src["path"] = str(local)
            notes.append(
                f"models.{role} is a local path ({local}): it must exist at that path inside the pod "
                "(e.g. on the models volume); hub ids are downloaded by the prepare step instead"
            )
    header = f"# Recipe {recipe_name}, as rendered by sdtk {__version__} for Kubernetes.\n"
    return header + yaml.safe_dump(data, sort_keys=False)
