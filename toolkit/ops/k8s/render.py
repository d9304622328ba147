"""Files of a Kubernetes deployment: `plan_k8s` adds the text files to the objects
(toolkit.ops.k8s.objects), `render_k8s` writes everything under one directory."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from toolkit import __version__
from toolkit._fs import atomic_write
from toolkit.ops.k8s.objects import K8sPlan, build_objects
from toolkit.ops.k8s.options import HPA_WAITING, MODELS_MOUNT, K8sOptions
from toolkit.ops.templating import render
from toolkit.server.workdir import REPO_SUBDIR

if TYPE_CHECKING:
    from toolkit.recipe import Recipe


def plan_k8s(recipe: Recipe, opts: K8sOptions | None = None, /, **changes: Any) -> K8sPlan:
    """Everything `render_k8s` writes, as objects (no files). `opts`, or its fields as keyword
    arguments (`plan_k8s(recipe, replicas=2)`)."""
    plan = build_objects(recipe, K8sOptions.of(opts, **changes))
    o = plan.options
    plan.extras["prometheus-adapter-values.yaml"] = _adapter_values(plan.metric, plan.namespace, plan.name)
    if plan.dockerfile:
        plan.extras["Dockerfile"] = render(
            "Dockerfile.j2",
            sdtk_version=__version__,
            base_image=plan.image,
            kubectl=plan.topology.multi_node,
            kubectl_version=o.kubectl_version,
            tag=f"{__version__}-{plan.image.rsplit(':', 1)[-1]}",
        )
    plan.extras["NOTES.md"] = _notes_md(plan)
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


def _notes_md(plan: K8sPlan) -> str:
    prepare, pull_from = plan.options.prepare, plan.options.pull_from
    access_mode, storage_class = plan.access_mode, plan.options.storage_class
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
        f"--metrics-url http://127.0.0.1:{plan_port(plan, 'metrics')}/metrics --model {plan.entry_model}",
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
    plan = plan_k8s(recipe, namespace=namespace, image=image, replicas=replicas, **options)
    return write_k8s(plan, out_dir, validate=validate, k8s_version=k8s_version)


def write_k8s(
    plan: K8sPlan, out_dir: Path | str, *, validate: bool = False, k8s_version: str | None = None
) -> list[Path]:
    """Write a planned deployment's files under `out_dir` (see render_k8s)."""
    from importlib import resources

    if validate:
        from toolkit.ops.manifests import DEFAULT_K8S_VERSION, validate_all

        validate_all(plan.manifests + plan.monitoring, k8s_version or DEFAULT_K8S_VERSION)
    out = Path(out_dir)
    header = (
        f"# Rendered by sdtk {__version__} for recipe {plan.recipe_name} (namespace {plan.namespace}).\n"
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
