"""The Kubernetes objects of a recipe: pure functions from (recipe, K8sOptions) to a `K8sPlan`
whose manifests and monitoring objects are dicts (the ConfigMap carries the rendered scripts).
toolkit.ops.k8s.render turns a plan into files; the layout decision is in the package docstring."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from toolkit.containers import images
from toolkit.errors import UsageError
from toolkit.ops.k8s import pods, workloads
from toolkit.ops.k8s.context import Context
from toolkit.ops.k8s.options import (
    HPA_PENDING,
    HPA_WAITING,
    HTTP_PROXY_PORT,
    MODELS_MOUNT,
    MONITOR_PORT,
    READY_MARKER,
    K8sOptions,
    k8s_name,
)
from toolkit.ops.k8s.scripts import config_files
from toolkit.ops.layout import Topology, entry_model, plan_topology
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
    entry_model: str = "ensemble"  # the model clients call (toolkit.ops.layout.entry_model)

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
    image, version, image_why = _image(recipe, opts)
    topo = plan_topology(recipe, gpus_per_node=opts.gpus_per_node, trtllm_version=version)
    recipe_name = recipe.display_name
    name = k8s_name(recipe_name)
    notes: list[str] = list(topo.notes)
    sv = recipe.serving
    ports = {"http": sv.http_port, "grpc": sv.grpc_port, "metrics": sv.metrics_port}
    if opts.monitor_sidecar and MONITOR_PORT in ports.values():
        raise UsageError(f"the sdtk monitor sidecar port {MONITOR_PORT} collides with a serving port")
    if opts.http_proxy and HTTP_PROXY_PORT in ports.values():
        raise UsageError(f"the HTTP proxy sidecar port {HTTP_PROXY_PORT} collides with a serving port")
    layout, layout_why = _layout(recipe, topo, opts)
    access_mode = _access_mode(topo, opts, notes)
    dest = f"{MODELS_MOUNT}/{recipe_name}"
    ctx = Context(
        recipe=recipe,
        opts=opts,
        topo=topo,
        image=image,
        name=name,
        recipe_name=recipe_name,
        labels={
            "app.kubernetes.io/name": "sdtk",
            "app.kubernetes.io/instance": name,
            "app.kubernetes.io/managed-by": "sdtk",
        },
        ports=ports,
        layout=layout,
        models_mount=MODELS_MOUNT,
        repo=f"{dest}/{REPO_SUBDIR}",
        marker=f"{dest}/{READY_MARKER}",
        env_common=pods.env_common(opts, MODELS_MOUNT),
        mounts=pods.mounts(MODELS_MOUNT),
        volumes=pods.volumes(name, opts),
    )
    files = config_files(ctx, notes)
    manifests = workloads.rbac(ctx) if topo.multi_node else []
    manifests += [
        workloads.config_map(ctx, files),
        workloads.volume_claim(ctx, access_mode),
        workloads.service(ctx),
    ]
    objs, scale_target = workloads.workload(ctx)
    manifests += objs
    if scale_target is None and opts.hpa:
        notes.append("no HPA for the StatefulSet layout: scaling leaders without their workers breaks groups")
    # The engine and reference backends queue requests inside the model (in-flight batching), where
    # Triton's pending count never sees them; both export nv_trt_llm_request_metrics{waiting}.
    metric = opts.hpa_metric or (HPA_WAITING if topo.backend in ("engine", "reference") else HPA_PENDING)
    max_replicas = opts.max_replicas_or_default
    rendered_hpa = opts.hpa and scale_target is not None and max_replicas > opts.replicas
    if opts.hpa and scale_target is not None and max_replicas == opts.replicas:
        notes.append(f"no HPA: --max-replicas equals --replicas ({opts.replicas})")
    if rendered_hpa:
        assert scale_target is not None
        manifests.append(workloads.autoscaler(ctx, scale_target, metric))
    dockerfile = _dockerfile(ctx, notes)
    notes += _notes(ctx)
    return K8sPlan(
        name=name,
        recipe_name=recipe_name,
        namespace=opts.namespace,
        image=image,
        image_why=image_why,
        topology=topo,
        layout=layout,
        layout_why=layout_why,
        manifests=manifests,
        monitoring=[workloads.service_monitor(ctx)],
        notes=notes,
        hpa_metric=metric if rendered_hpa else None,
        options=opts,
        access_mode=access_mode,
        dockerfile=dockerfile,
        metric=metric,
        entry_model=entry_model(recipe, topo.backend),
    )


def _image(recipe: Recipe, opts: K8sOptions) -> tuple[str, str | None, str]:
    """(image, TensorRT-LLM version, why): an explicit image wins; its tag tells the version when it
    is an NGC trtllm-python-py3 tag in the verified table. Any other image is never said to carry a
    version: the plan is rendered for the recipe's trtllm_version, and `why` says that is unverified."""
    if opts.image:
        carried = images.trtllm_version_of(opts.image)
        if carried is not None:
            return (
                opts.image,
                carried,
                f"given with --image (carries TensorRT-LLM {carried}; {images.SOURCE})",
            )
        tag = images.container_of(opts.image)
        what = (
            f"container {tag} is not in sdtk's verified table, so which TensorRT-LLM it carries is unverified"
            if tag
            else "not an NGC trtllm-python-py3 image, so which TensorRT-LLM it carries is unverified"
        )
        version = recipe.trtllm_version
        target = (
            f"rendered for the recipe's trtllm_version {version}, which this image is not known to carry"
            if version
            else "rendered for no particular TensorRT-LLM version"
        )
        return opts.image, version, f"given with --image; {what}; {target}"
    version = recipe.trtllm_version or images.DEFAULT_TRTLLM
    src = "the recipe's trtllm_version" if recipe.trtllm_version else "sdtk's default"
    why = f"NGC container for TensorRT-LLM {version} ({src}); table: {images.SOURCE}"
    return images.image_for(version), version, why


def _layout(recipe: Recipe, topo: Topology, opts: K8sOptions) -> tuple[str, str]:
    gpus_per_node = opts.gpus_per_node
    if not topo.multi_node:
        world = recipe.parallel.tp * recipe.parallel.pp
        return "deployment", f"tp×pp = {world} fits one node ({gpus_per_node} GPUs): a Deployment"
    layout = opts.multinode
    why = (
        f"tp×pp = {topo.gpus} GPUs > {gpus_per_node} per node: {topo.nodes} nodes × {topo.gpus_in_node} GPUs "
        f"in one leader-mode MPI world. "
        + (
            "LeaderWorkerSet: whole-group restart (an MPI world cannot survive a lost rank), HPA over whole "
            "groups, upstream TRT-LLM+Triton LWS example; needs the LWS controller."
            if layout == "leaderworkerset"
            else "StatefulSet pair + headless Service (no LWS controller needed); no HPA, no group restart."
        )
    )
    return layout, why


def _access_mode(topo: Topology, opts: K8sOptions, notes: list[str]) -> str:
    max_replicas = opts.max_replicas_or_default
    shared = topo.multi_node or max_replicas > 1 or (opts.hpa and max_replicas > opts.replicas)
    if not shared:
        return "ReadWriteOnce"
    notes.append(
        "the models volume is ReadWriteMany (several pods share it): use a storage class that supports it "
        "(NFS, CephFS, Filestore, EFS, Azure Files)"
        + (f"; given: {opts.storage_class}" if opts.storage_class else "")
    )
    return "ReadWriteMany"


def _dockerfile(ctx: Context, notes: list[str]) -> bool:
    """Whether the pods need an image built from extras/Dockerfile (sdtk, kubectl), and why."""
    opts, topo, image = ctx.opts, ctx.topo, ctx.image
    needs_sdtk = opts.prepare == "build" or opts.monitor_sidecar
    if not (needs_sdtk or topo.multi_node):
        return False
    why = []
    if opts.prepare == "build":
        why.append("the prepare init container runs `sdtk build`")
    if opts.monitor_sidecar:
        why.append("the monitor sidecar runs `sdtk monitor`")
    if topo.multi_node:
        why.append("the leader's mpirun needs kubectl")
    if images.trtllm_version_of(image) is not None:
        notes.append(
            f"{image} is a stock NGC image, but {' and '.join(why)}: build extras/Dockerfile, push it, "
            "and re-render with --image"
        )
    return True


def _notes(ctx: Context) -> list[str]:
    """What the backend, the HTTP proxy and serving.host mean for this deployment."""
    opts, backend = ctx.opts, ctx.topo.backend
    notes = []
    if backend == "llmapi":
        notes.append(
            "backend llmapi: tensorrt_llm.LLM loads the checkpoint when Triton starts (hub ids download into "
            f"HF_HOME={MODELS_MOUNT}/.cache/huggingface on the volume); the startup probe allows "
            f"{opts.startup_timeout_s}s"
        )
        # The pod's `sdtk build` renders the LLM-API options: check them for the version now (a
        # refusal raises before a file is written) and say what is unverified for it.
        from toolkit.build import llmapi

        notes += llmapi.check_recipe(ctx.recipe, ctx.recipe.trtllm_version)
    if backend == "reference":
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
    host = ctx.recipe.serving.host
    if host not in ("0.0.0.0", "::"):
        notes.append(
            f"serving.host {host} is ignored in the pod: Triton binds all interfaces so that the Service and "
            "the kubelet's probes reach it"
        )
    return notes
