"""`sdtk deploy RECIPE --target k8s`: Kubernetes manifests for one recipe.

Layout (see NOTES.md in the output for the rendered decision):

- TP×PP fits one node (≤ --gpus-per-node GPUs): a **Deployment**; each replica is one pod with all
  of the recipe's GPUs, launched exactly as locally (leader-mode `mpirun` for several ranks).
- Otherwise a multi-node layout, engine backend only (leader mode is the only documented way
  for Triton + TensorRT-LLM to span nodes):
  - **LeaderWorkerSet** (default; leaderworkerset.x-k8s.io/v1): one group = one model replica =
    a leader pod (rank 0..k-1, ports, probes) plus worker pods. Chosen because an MPI world
    cannot survive a lost rank and LWS recreates the whole group when any pod restarts
    (`restartPolicy: RecreateGroupOnPodRestart`), scales whole groups (its scale subresource
    makes the HPA work, selecting leader pods), and is the layout of the upstream
    TensorRT-LLM + Triton LWS example. Needs the LWS controller installed. It is a CRD, so it
    is validated against a schema written from its Go types plus the core PodTemplate schema.
  - **StatefulSet** fallback (`multinode="statefulset"`) for clusters without LWS: a leader
    StatefulSet and a worker StatefulSet behind one headless Service; no HPA (scaling the leaders
    alone would break the pairing) and no group restart (a lost worker makes the leader's mpirun
    fail and restart, which waits for the workers again).
  In both, the leader's `mpirun` starts remote ranks with `kubectl exec` as OpenMPI's rsh agent
  (no sshd), which needs kubectl in the image (extras/Dockerfile) and a pods/exec Role.
- A PVC holds `/models/<recipe>/` (engines and the Triton repository). An init container
  prepares it once per volume: `build` runs `sdtk build` + `sdtk deploy --render-only` (needs an
  image with sdtk: extras/Dockerfile), `pull` downloads a prepared directory (`hf://org/repo[@rev]`
  or an http(s) tar archive), `none` expects it there. ReadWriteMany when several pods share it.
- Probes on the HTTP port: startup (generous, for engine load) and readiness on
  /v2/health/ready, liveness on /v2/health/live. Shared memory: an in-memory emptyDir at /dev/shm.
- A Service (http, grpc, metrics), a ServiceMonitor (monitoring/), and an autoscaling/v2 HPA on
  a per-pod queue metric served by prometheus-adapter (rules in extras/).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml

from toolkit import __version__
from toolkit._fs import atomic_write
from toolkit.errors import UsageError
from toolkit.ops import images
from toolkit.ops.layout import Topology, launch_argv, orchestrator_env, plan_topology
from toolkit.ops.templating import raw, render, shell_join, var
from toolkit.shellsafe import check_line

if TYPE_CHECKING:
    from toolkit.recipe import Recipe

Prepare = Literal["build", "pull", "none"]
MultiNode = Literal["leaderworkerset", "statefulset"]

MODELS_MOUNT = "/models"
SCRIPTS_MOUNT = "/sdtk"
REPO_SUBDIR = "triton_repo"  # <workdir>/<recipe>/triton_repo: what `sdtk deploy --render-only` writes
READY_MARKER = ".sdtk-ready"
MONITOR_PORT = 9400
KUBECTL_VERSION = "v1.30.0"
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"

# HPA metrics, served per pod by prometheus-adapter from what Prometheus scrapes off the metrics port.
HPA_PENDING = "nv_inference_pending_request_count"  # Triton: requests waiting in the model's queue
HPA_WAITING = "sdtk_trtllm_waiting_requests"  # nv_trt_llm_request_metrics{request_type="waiting"}


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


def k8s_name(name: str, max_len: int = 40) -> str:
    """A DNS-1035 label (Service names are the strictest), short enough for suffixes."""
    s = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
    if not s or not s[0].isalpha():
        s = "sdtk-" + s
    s = s[:max_len].rstrip("-")
    return s


def _quantity(value: str, field_name: str) -> str:
    if not re.match(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$", value):
        raise UsageError(f"{field_name} '{value}' is not a Kubernetes quantity such as 20Gi")
    return value


def _pull_source(pull_from: str | None) -> tuple[str, dict[str, str]]:
    if not pull_from:
        raise UsageError(
            "prepare=pull needs --pull-from: hf://org/repo[@revision] or an http(s):// tar archive",
            hint="the download must hold <recipe>/ content: triton_repo/ plus the engines it points to",
        )
    if pull_from.startswith("hf://"):
        ref = pull_from[5:]
        repo, _, rev = ref.partition("@")
        if not re.match(r"^[\w.-]+/[\w.-]+$", repo):
            raise UsageError(f"--pull-from {pull_from}: expected hf://org/repo[@revision]")
        return "pull-hf", {"pull_repo": repo, "pull_revision": rev, "pull_ref": pull_from}
    if re.match(r"^https?://", pull_from):
        return "pull-url", {"pull_repo": "", "pull_revision": "", "pull_ref": pull_from}
    raise UsageError(
        f"--pull-from '{pull_from}' is neither hf://org/repo[@revision] nor an http(s):// URL",
        hint="for S3/GCS, pass a pre-signed https URL of a tar archive",
    )


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


def plan_k8s(
    recipe: Recipe,
    *,
    namespace: str = "default",
    image: str | None = None,
    replicas: int = 1,
    max_replicas: int | None = None,
    gpus_per_node: int = 8,
    multinode: MultiNode = "leaderworkerset",
    prepare: Prepare = "build",
    pull_from: str | None = None,
    storage_size: str = "200Gi",
    storage_class: str | None = None,
    shm_size: str = "20Gi",
    startup_timeout_s: int = 3600,
    prepare_timeout_s: int = 4 * 3600,
    hpa: bool = True,
    hpa_metric: str | None = None,
    hpa_target: str = "2",
    monitor_sidecar: bool = False,
    hf_token_secret: str | None = "hf-token",
    servicemonitor_labels: dict[str, str] | None = None,
    kubectl_version: str = KUBECTL_VERSION,
) -> K8sPlan:
    """Everything `render_k8s` writes, as objects (no files)."""
    if replicas < 1:
        raise UsageError(f"--replicas must be >= 1, got {replicas}")
    max_replicas = max_replicas if max_replicas is not None else replicas * 2
    if max_replicas < replicas:
        raise UsageError(f"--max-replicas {max_replicas} is below --replicas {replicas}")
    if not re.match(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", namespace) or len(namespace) > 63:
        raise UsageError(f"--namespace '{namespace}' is not a valid Kubernetes namespace name")
    if multinode not in ("leaderworkerset", "statefulset"):
        raise UsageError(f"multinode must be leaderworkerset or statefulset, got '{multinode}'")
    if prepare not in ("build", "pull", "none"):
        raise UsageError(f"prepare must be build, pull or none, got '{prepare}'")
    _quantity(storage_size, "--storage-size")
    _quantity(shm_size, "--shm-size")
    # These land on Dockerfile instruction lines and in log lines of the scripts: one line each.
    for what, value in (("--image", image), ("--pull-from", pull_from), ("kubectl_version", kubectl_version)):
        if value is not None:
            check_line(value, what)
    if image is not None and re.search(r"\s", image):
        raise UsageError(f"--image '{image[:100]}' contains whitespace; it is not an image reference")

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
        prep_mode, pull = _pull_source(pull_from)
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
        env=orchestrator_env(topo),
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
            container["livenessProbe"] = {
                "httpGet": {"path": "/v2/health/live", "port": http},
                "periodSeconds": 15,
                "timeoutSeconds": 5,
                "failureThreshold": 4,
            }
        containers = [container]
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
    svc_ports = [{"name": k, "port": v, "targetPort": k, "protocol": "TCP"} for k, v in ports.items()]
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

    extras = {
        "prometheus-adapter-values.yaml": _adapter_values(metric, namespace, name),
    }
    if needs_sdtk or topo.multi_node:
        extras["Dockerfile"] = render(
            "Dockerfile.j2",
            sdtk_version=__version__,
            base_image=image,
            kubectl=topo.multi_node,
            kubectl_version=kubectl_version,
            tag=f"{__version__}-{image.rsplit(':', 1)[-1]}",
        )
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
    if sv.host not in ("0.0.0.0", "::"):
        notes.append(
            f"serving.host {sv.host} is ignored in the pod: Triton binds all interfaces so that the Service and "
            "the kubelet's probes reach it"
        )
    plan = K8sPlan(
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
        extras=extras,
        notes=notes,
        hpa_metric=metric if rendered_hpa else None,
    )
    plan.extras["NOTES.md"] = _notes_md(plan, prepare, pull_from, access_mode, storage_class)
    return plan


def _adapter_values(metric: str, namespace: str, name: str) -> str:
    """prometheus-adapter Helm values: the per-pod custom metric the HPA reads."""
    resources = {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}}
    if metric == HPA_WAITING:
        rule = {
            "seriesQuery": 'nv_trt_llm_request_metrics{request_type="waiting",namespace!="",pod!=""}',
            "resources": resources,
            "name": {"matches": "^nv_trt_llm_request_metrics$", "as": HPA_WAITING},
            "metricsQuery": 'sum(<<.Series>>{<<.LabelMatchers>>,request_type="waiting"}) by (<<.GroupBy>>)',
        }
    else:
        rule = {
            "seriesQuery": f'{metric}{{namespace!="",pod!=""}}',
            "resources": resources,
            "name": {"matches": f"^{metric}$", "as": metric},
            "metricsQuery": "sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)",
        }
    header = (
        f"# prometheus-adapter Helm values for the HPA of {namespace}/{name} (rendered by sdtk {__version__}).\n"
        "# The ServiceMonitor makes Prometheus scrape Triton's metrics port with namespace/pod labels;\n"
        f"# this rule serves `{metric}` per pod on the custom metrics API, summed over the pod's models.\n"
        "#   helm upgrade --install prometheus-adapter prometheus-community/prometheus-adapter \\\n"
        "#     -n monitoring -f prometheus-adapter-values.yaml\n"
        f"#   kubectl get --raw '/apis/custom.metrics.k8s.io/v1beta1/namespaces/{namespace}/pods/*/{metric}'\n"
    )
    return header + yaml.safe_dump({"rules": {"default": False, "custom": [rule]}}, sort_keys=False)


def _notes_md(
    plan: K8sPlan, prepare: str, pull_from: str | None, access_mode: str, storage_class: str | None
) -> str:
    t = plan.topology
    ns = plan.namespace
    lines = [
        f"# {plan.name}: Kubernetes deployment of recipe `{plan.recipe_name}` (sdtk {__version__})",
        "",
        f"- **Layout: {plan.layout}.** {plan.layout_why}",
        f"- Backend `{t.backend}` ({t.why}); {t.nodes} node(s) × {t.gpus_in_node} GPU(s) per replica, "
        f"{t.ranks} Triton rank(s).",
        f"- Image `{plan.image}`: {plan.image_why}.",
        f"- Models volume `{plan.name}-models` ({access_mode}"
        + (f", storage class {storage_class}" if storage_class else "")
        + f") at {MODELS_MOUNT}; prepare = `{prepare}`"
        + (f" from `{pull_from}`" if pull_from else "")
        + f"; Triton serves `{MODELS_MOUNT}/{plan.recipe_name}/{REPO_SUBDIR}`.",
        f"- Autoscaling: {'HPA on `' + plan.hpa_metric + '` (extras/prometheus-adapter-values.yaml)' if plan.hpa_metric else 'none'}.",
        "",
        "## Apply",
        "",
        "```bash",
        f"kubectl create namespace {ns} --dry-run=client -o yaml | kubectl apply -f -",
        f"kubectl -n {ns} create secret generic hf-token --from-literal=token=$HF_TOKEN   # gated hub models",
        "kubectl apply -f .                      # core objects",
        "kubectl apply -f monitoring/            # ServiceMonitor (prometheus-operator)",
        {
            "deployment": f"kubectl -n {ns} rollout status deployment/{plan.name}",
            # kubectl rollout does not know CRDs; LWS reports an Available condition.
            "leaderworkerset": f"kubectl -n {ns} wait --for=condition=Available --timeout=2h leaderworkerset/{plan.name}",
            "statefulset": f"kubectl -n {ns} rollout status statefulset/{plan.name}-leader",
        }[plan.layout],
        f"kubectl -n {ns} port-forward svc/{plan.name} {plan_port(plan, 'http')} {plan_port(plan, 'metrics')}",
        f"sdtk doctor --url http://127.0.0.1:{plan_port(plan, 'http')} "
        f"--metrics-url http://127.0.0.1:{plan_port(plan, 'metrics')}/metrics",
        "```",
    ]
    if plan.layout == "leaderworkerset":
        lines += [
            "",
            "Install the LeaderWorkerSet controller first (https://lws.sigs.k8s.io/docs/installation/).",
        ]
    if plan.notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in plan.notes]
    lines += [
        "",
        "Dashboards: extras/grafana-dashboard.json (Triton nv_inference_*, GPU, TensorRT-LLM and sdtk_spec_*).",
        "",
    ]
    return "\n".join(lines)


def plan_port(plan: K8sPlan, kind: str) -> int:
    svc = next(m for m in plan.manifests if m["kind"] == "Service" and m["metadata"]["name"] == plan.name)
    return next(p["port"] for p in svc["spec"]["ports"] if p["name"] == kind)


def _dump_all(objs: list[dict], header: str) -> str:
    return header + "".join("---\n" + yaml.safe_dump(o, sort_keys=False, width=100) for o in objs)


def render_k8s(
    recipe: Recipe,
    *,
    namespace: str = "default",
    image: str | None = None,
    replicas: int = 1,
    out_dir: Path | str,
    validate: bool = False,
    k8s_version: str | None = None,
    **options: Any,
) -> list[Path]:
    """Write the manifests for `recipe` under `out_dir`; returns the files written.

    out_dir/<name>.yaml                          core objects (kubectl apply -f out_dir)
    out_dir/monitoring/servicemonitor.yaml       prometheus-operator ServiceMonitor
    out_dir/extras/prometheus-adapter-values.yaml, extras/grafana-dashboard.json, extras/Dockerfile
    out_dir/NOTES.md                             the layout decision, requirements, commands

    `options` are plan_k8s's (gpus_per_node, multinode, prepare, pull_from, storage_size, ...).
    With `validate`, every manifest is checked offline first (toolkit.ops.manifests).
    """
    from importlib import resources

    plan = plan_k8s(recipe, namespace=namespace, image=image, replicas=replicas, **options)
    if validate:
        from toolkit.ops.manifests import DEFAULT_K8S_VERSION, validate_all

        validate_all(plan.manifests + plan.monitoring, k8s_version or DEFAULT_K8S_VERSION)
    out = Path(out_dir)
    header = (
        f"# Rendered by sdtk {__version__} for recipe {plan.recipe_name} (namespace {namespace}).\n"
        f"# Layout: {plan.layout}. {plan.layout_why}\n"
        f"# Image: {plan.image} ({plan.image_why}).\n"
        "# Do not edit by hand: re-render with `sdtk deploy RECIPE --target k8s`.\n"
    )
    written: dict[Path, str] = {
        out / f"{plan.name}.yaml": _dump_all(plan.manifests, header),
        out / "monitoring" / "servicemonitor.yaml": _dump_all(
            plan.monitoring, header + "# Needs the prometheus-operator CRDs (monitoring.coreos.com/v1).\n"
        ),
        out / "NOTES.md": plan.extras["NOTES.md"],
    }
    for fname, text in plan.extras.items():
        if fname != "NOTES.md":
            written[out / "extras" / fname] = text
    dashboard = resources.files("toolkit.ops") / "dashboards" / "sdtk-speculative.json"
    written[out / "extras" / "grafana-dashboard.json"] = dashboard.read_text(encoding="utf-8")
    return [atomic_write(path, text) for path, text in written.items()]


def load_manifests(path: Path | str) -> list[dict]:
    """All objects in a rendered multi-document YAML file."""
    return [d for d in yaml.safe_load_all(Path(path).read_text(encoding="utf-8")) if d]
