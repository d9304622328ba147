"""`sdtk deploy RECIPE --target k8s`: Kubernetes manifests for one recipe.

Three modules: `options` (K8sOptions, the closed and checked inputs, and the fixed names),
`objects` (the Kubernetes objects as dicts, pure), `render` (the text files, and writing them).

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
- Probes: startup (generous, for engine load) and readiness on /v2/health/ready; liveness
  runs toolkit/server/stubcheck.py (shipped in the ConfigMap), the stub check of `sdtk status`,
  since /v2/health/* stays 200 when a Python backend stub dies (server#8604). Shared memory: an
  in-memory emptyDir at /dev/shm.
- An nginx sidecar (`http-proxy`) in front of Triton's HTTP port, which the Service's http port
  targets: it caps bodies and refuses form-encoded ones, which crash tritonserver 2.51's HTTP
  frontend (server#5840, libevhtp#118). `http_proxy=False` leaves it out.
- A Service (http, grpc, metrics), a ServiceMonitor (monitoring/), and an autoscaling/v2 HPA on
  a per-pod queue metric served by prometheus-adapter (rules in extras/).
"""

from __future__ import annotations

from toolkit.ops.k8s.objects import K8sPlan, build_objects
from toolkit.ops.k8s.options import (
    HPA_PENDING,
    HPA_WAITING,
    KUBECTL_VERSION,
    MODELS_MOUNT,
    MONITOR_PORT,
    READY_MARKER,
    SCRIPTS_MOUNT,
    K8sOptions,
    MultiNode,
    Prepare,
    k8s_name,
)
from toolkit.ops.k8s.render import load_manifests, plan_k8s, plan_port, render_k8s, write_k8s
from toolkit.server.workdir import REPO_SUBDIR

__all__ = [
    "HPA_PENDING",
    "HPA_WAITING",
    "KUBECTL_VERSION",
    "MODELS_MOUNT",
    "MONITOR_PORT",
    "READY_MARKER",
    "REPO_SUBDIR",
    "SCRIPTS_MOUNT",
    "K8sOptions",
    "K8sPlan",
    "MultiNode",
    "Prepare",
    "build_objects",
    "k8s_name",
    "load_manifests",
    "plan_k8s",
    "plan_port",
    "render_k8s",
    "write_k8s",
]
