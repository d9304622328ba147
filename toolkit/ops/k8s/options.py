"""The inputs of `sdtk deploy --target k8s`: one closed, validated `K8sOptions`, and the fixed
names (mount points, ports, metric names) the objects and files share."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Literal

from toolkit.errors import UsageError, check_names
from toolkit.shellsafe import check_line

Prepare = Literal["build", "pull", "none"]
MultiNode = Literal["leaderworkerset", "statefulset"]

MODELS_MOUNT = "/models"
SCRIPTS_MOUNT = "/sdtk"
READY_MARKER = ".sdtk-ready"
MONITOR_PORT = 9400
KUBECTL_VERSION = "v1.30.0"
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
# The HTTP proxy sidecar in front of Triton's HTTP port (nginx.conf.j2 says why).
HTTP_PROXY_PORT = 9480
HTTP_PROXY_IMAGE = "nginxinc/nginx-unprivileged:1.27-alpine"

# HPA metrics, served per pod by prometheus-adapter from what Prometheus scrapes off the metrics port.
HPA_PENDING = "nv_inference_pending_request_count"  # Triton: requests waiting in the model's queue
HPA_WAITING = "sdtk_trtllm_waiting_requests"  # nv_trt_llm_request_metrics{request_type="waiting"}


@dataclass(frozen=True)
class K8sOptions:
    """How to deploy a recipe on Kubernetes; checked when made (UsageError naming the flag)."""

    namespace: str = "default"
    image: str | None = None  # default: the NGC container of the recipe's TensorRT-LLM version
    replicas: int = 1
    max_replicas: int | None = None  # default: 2 × replicas
    gpus_per_node: int = 8
    multinode: MultiNode = "leaderworkerset"
    prepare: Prepare = "build"
    pull_from: str | None = None  # prepare=pull: hf://org/repo[@revision] or an http(s) tar archive
    storage_size: str = "200Gi"
    storage_class: str | None = None
    shm_size: str = "20Gi"
    startup_timeout_s: int = 3600
    prepare_timeout_s: int = 4 * 3600
    hpa: bool = True
    hpa_metric: str | None = None  # default: by backend (HPA_WAITING or HPA_PENDING)
    hpa_target: str = "2"
    monitor_sidecar: bool = False
    hf_token_secret: str | None = "hf-token"
    servicemonitor_labels: dict[str, str] | None = None
    kubectl_version: str = KUBECTL_VERSION
    http_proxy: bool = True  # nginx in front of Triton's HTTP port: caps bodies, refuses form-encoded
    http_proxy_image: str = HTTP_PROXY_IMAGE
    http_proxy_max_body: str = "16m"  # nginx client_max_body_size

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise UsageError(f"--replicas must be >= 1, got {self.replicas}")
        if self.max_replicas_or_default < self.replicas:
            raise UsageError(f"--max-replicas {self.max_replicas} is below --replicas {self.replicas}")
        ns = self.namespace
        if not re.match(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", ns) or len(ns) > 63:
            raise UsageError(f"--namespace '{ns}' is not a valid Kubernetes namespace name")
        if self.multinode not in ("leaderworkerset", "statefulset"):
            raise UsageError(f"multinode must be leaderworkerset or statefulset, got '{self.multinode}'")
        if self.prepare not in ("build", "pull", "none"):
            raise UsageError(f"prepare must be build, pull or none, got '{self.prepare}'")
        _quantity(self.storage_size, "--storage-size")
        _quantity(self.shm_size, "--shm-size")
        # These land on Dockerfile instruction lines and in log lines of the scripts: one line each.
        for what, value in (
            ("--image", self.image),
            ("--pull-from", self.pull_from),
            ("kubectl_version", self.kubectl_version),
            ("http_proxy_image", self.http_proxy_image),
        ):
            if value is not None:
                check_line(value, what)
        if re.search(r"\s", self.http_proxy_image):
            raise UsageError(f"http_proxy_image '{self.http_proxy_image[:100]}' is not an image reference")
        if not re.match(r"^[0-9]+[kKmMgG]?$", self.http_proxy_max_body):
            raise UsageError(
                f"http_proxy_max_body '{self.http_proxy_max_body}' is not an nginx size such as 16m"
            )
        if self.image is not None and re.search(r"\s", self.image):
            raise UsageError(
                f"--image '{self.image[:100]}' contains whitespace; it is not an image reference"
            )

    @property
    def max_replicas_or_default(self) -> int:
        return self.max_replicas if self.max_replicas is not None else self.replicas * 2

    @classmethod
    def of(cls, opts: K8sOptions | None = None, /, **changes: Any) -> K8sOptions:
        """`opts` (default: the defaults) with `changes`; an unknown name is a UsageError."""
        check_names(changes, (f.name for f in dataclasses.fields(cls)), "Kubernetes option")
        return dataclasses.replace(opts or cls(), **changes)


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


def pull_source(pull_from: str | None) -> tuple[str, dict[str, str]]:
    """(prepare.sh mode, its pull_* values) of prepare=pull's source."""
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
