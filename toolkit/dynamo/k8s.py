"""`sdtk deploy RECIPE --target k8s --engine dynamo [--disagg]`: a DynamoGraphDeployment.

Writes, under `--out`: `<name>.yaml` (a ConfigMap holding the engine YAML, then the
`DynamoGraphDeployment`) and `NOTES.md` (the operator's install, apply, what is unverified).
`--dry-run` prints the same as a runbook: each component's command and the engine YAML(s).

Facts (ai-dynamo 1.6.1 wheel, `dynamo/profiler/templates/dgd/trtllm/{agg,disagg}.yaml`;
ai-dynamo/dynamo `examples/backends/trtllm/deploy/v1beta1/agg-with-config.yaml` @2ac51dd):
- `apiVersion: nvidia.com/v1beta1`, `kind: DynamoGraphDeployment`, `spec.components[]` with `name`,
  `type` (frontend | worker | prefill | decode), `replicas`, `podTemplate` whose container `main`
  runs image `nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:<dynamo version>`;
- frontend: `python3 -m dynamo.frontend`; workers: `python3 -m dynamo.trtllm --model M
  --served-model-name N --extra-engine-args FILE` (`--model-path` is the obsolete spelling,
  `dynamo/trtllm/backend_args.py` 44-56), plus `--disaggregation-mode prefill|decode` (223-243);
- the engine YAML reaches the pod as a ConfigMap key mounted with `subPath`.
- Disaggregated speculation as NVIDIA configures it (ai-dynamo/dynamo @b6f88b1f
  `examples/backends/trtllm/engine_configs/llama4/eagle/eagle_{prefill,decode}.yaml`): the same
  `speculative_config` on prefill and decode, `disable_overlap_scheduler: true` on both, a
  `cache_transceiver_config` (backend UCX, `max_tokens_in_buffer` above the longest input) on both,
  CUDA graphs on decode only.

The engine YAML is toolkit.build.llmapi's, for the TensorRT-LLM that the Dynamo image carries
(ai-dynamo 1.6.1's `trtllm` extra pins tensorrt-llm==1.3.0rc29), its speculative_config checked by
the build's preflight against sdtk's stand-in of that line (toolkit/build/llmapi_schema.py).
"""

from __future__ import annotations

import dataclasses
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from toolkit import __version__
from toolkit._fs import atomic_write
from toolkit.dynamo.plan import router_mode_of
from toolkit.errors import UsageError, check_names

if TYPE_CHECKING:
    from toolkit.recipe import Recipe

DYNAMO_VERSION = "1.6.1"
DYNAMO_TRTLLM = "1.3.0rc29"  # ai-dynamo 1.6.1's `trtllm` extra: tensorrt-llm==1.3.0rc29
IMAGE = f"nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:{DYNAMO_VERSION}"
ENGINE_DIR = "/sdtk/engine"  # where the ConfigMap's engine YAML is mounted in a worker
TRANSCEIVER_BACKEND = "UCX"  # eagle_{prefill,decode}.yaml @b6f88b1f


@dataclass
class DgdPlan:
    name: str
    namespace: str
    recipe_name: str
    mode: str
    image: str
    disagg: bool
    model: str  # --model: the hub id the workers download
    served_name: str
    trtllm_version: str
    engine_yamls: dict[str, str]  # ConfigMap key → the engine YAML's text
    commands: dict[str, list[str]]  # component → its argv (command + args)
    manifests: list[dict[str, Any]]  # the ConfigMap, the DynamoGraphDeployment
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)

    def script(self) -> str:
        """--dry-run: what each component runs, and the engine YAML(s) it reads."""
        kind = "disaggregated (prefill + decode)" if self.disagg else "aggregated"
        lines = [
            f"# DynamoGraphDeployment {self.namespace}/{self.name}: recipe {self.recipe_name} ({self.mode}), "
            f"{kind}, image {self.image} (TensorRT-LLM {self.trtllm_version})",
            *(f"# {n}" for n in self.notes),
        ]
        for comp, argv in self.commands.items():
            lines += [f"# --- component {comp}", shlex.join(argv)]
        for key, text in self.engine_yamls.items():
            lines += [
                f"# --- {ENGINE_DIR}/{key} (ConfigMap {self.name}-engine, key {key})",
                text.rstrip("\n"),
            ]
        return "\n".join(lines) + "\n"


def _refuse_local(args: dict[str, Any], sources: dict[str, Any], where: str = "") -> None:
    """A pod cannot read this machine's paths: every model the YAML names must be a hub id."""
    local = {str(r.path) for r in sources.values() if r.path is not None and r.repo is None}
    local |= {str(r.path) for r in sources.values() if r.path is not None and r.revision}
    for key, value in args.items():
        dotted = f"{where}.{key}" if where else key
        if isinstance(value, dict):
            _refuse_local(value, sources, dotted)
        elif isinstance(value, str) and (value in local or value.startswith("${")):
            raise UsageError(
                f"--target k8s --engine dynamo: the engine YAML's {dotted} would be '{value}', a path on "
                "this machine that the pods cannot read",
                hint="name the models by Hugging Face id (models.target, models.eagle_head, ...) without a "
                "pinned revision; the workers download them",
            )


def engine_args(recipe: Recipe, *, progress: Any = None) -> tuple[dict[str, Any], str, list[str]]:
    """(LLM-API arguments, the target's hub id, notes) for the Dynamo image's TensorRT-LLM."""
    from toolkit.build import llmapi
    from toolkit.build.core import planned_context

    notes = []
    declared = recipe.trtllm_version
    if declared and declared != DYNAMO_TRTLLM:
        notes.append(
            f"the recipe declares TensorRT-LLM {declared}; the Dynamo {DYNAMO_VERSION} image carries "
            f"{DYNAMO_TRTLLM}, so the engine YAML is written for that"
        )
    r = recipe.model_copy(update={"backend": "llmapi", "trtllm_version": DYNAMO_TRTLLM})
    ctx = planned_context(r, progress=progress)
    args = {"backend": "pytorch", **llmapi.llm_args(ctx)}
    target = ctx.sources["target"]
    if target.repo is None:
        raise UsageError(
            f"--target k8s --engine dynamo: models.target is a local path ({target.path}) the pods cannot read",
            hint="name the target by Hugging Face id; the workers download it",
        )
    _refuse_local(args, ctx.sources)
    notes += [f"unverified for TensorRT-LLM {DYNAMO_TRTLLM}: {n}" for n in llmapi.unverified(ctx)]
    return args, target.repo, notes


def _disagg_yaml(args: dict[str, Any], role: str, max_seq_len: int) -> dict[str, Any]:
    out = dict(args)
    out["disable_overlap_scheduler"] = True
    out["cache_transceiver_config"] = {"backend": TRANSCEIVER_BACKEND, "max_tokens_in_buffer": max_seq_len}
    if role == "prefill":
        out.pop("cuda_graph_config", None)  # eagle_prefill.yaml has none; decode keeps them
    return out


def _dump(recipe_name: str, key: str, data: dict[str, Any]) -> str:
    header = (
        f"# {key}: TensorRT-LLM {DYNAMO_TRTLLM} LLM-API options for recipe {recipe_name}, written by sdtk "
        f"{__version__}\n# read by `python3 -m dynamo.trtllm --extra-engine-args {ENGINE_DIR}/{key}`\n"
    )
    return header + yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=4096)


def _container(image: str, argv: list[str], secret: str | None) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "main", "image": image, "command": argv[:3], "args": argv[3:]}
    if secret:
        c["env"] = [
            {
                "name": "HF_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": secret, "key": "token", "optional": True}},
            }
        ]
    return c


@dataclass(frozen=True)
class DgdOptions:
    """A DynamoGraphDeployment's shape: its namespace and image, aggregated (`workers` worker
    replicas) or `disagg` (`prefill_workers` prefill and `workers` decode replicas), the
    frontend's router mode, and the Secret holding HF_TOKEN (None: none)."""

    namespace: str = "default"
    image: str | None = None
    workers: int = 1
    prefill_workers: int = 1
    disagg: bool = False
    router_mode: str | None = None  # None: the recipe's serving.dynamo.router_mode
    hf_token_secret: str | None = "hf-token"

    @classmethod
    def of(cls, opts: DgdOptions | None = None, /, **changes: Any) -> DgdOptions:
        """`opts` (default: the defaults) with `changes`; an unknown name is a UsageError."""
        check_names(changes, (f.name for f in dataclasses.fields(cls)), "DynamoGraphDeployment option")
        return dataclasses.replace(opts or cls(), **changes)


def plan_dgd(
    recipe: Recipe, opts: DgdOptions | None = None, /, *, progress: Any = None, **changes: Any
) -> DgdPlan:
    """The ConfigMap and DynamoGraphDeployment of `recipe` (DgdOptions: `opts`, or its fields as
    keyword arguments)."""
    from toolkit.ops.k8s import K8sOptions, k8s_name

    o = DgdOptions.of(opts, **changes)
    namespace, image, workers, prefill_workers = o.namespace, o.image, o.workers, o.prefill_workers
    disagg, router_mode, hf_token_secret = o.disagg, o.router_mode, o.hf_token_secret

    K8sOptions(namespace=namespace, image=image)  # the same checks as the Triton render
    if prefill_workers != 1 and not disagg:
        raise UsageError("--prefill-workers goes with --disagg (aggregated workers do their own prefill)")
    if workers < 1 or prefill_workers < 1:
        raise UsageError(
            f"--workers and --prefill-workers must be at least 1, not {workers}/{prefill_workers}"
        )
    router_mode = router_mode_of(recipe, router_mode)
    args, model, notes = engine_args(recipe, progress=progress)
    name = k8s_name(recipe.display_name)
    img = image or IMAGE
    served = (
        recipe.serving.model_name if "model_name" in recipe.serving.model_fields_set else recipe.display_name
    )
    roles = {"prefill": prefill_workers, "decode": workers} if disagg else {"worker": workers}
    max_seq = recipe.build.max_seq_len
    yamls = {
        f"{role}.yaml": _dump(
            recipe.display_name, f"{role}.yaml", _disagg_yaml(args, role, max_seq) if disagg else args
        )
        for role in roles
    }
    frontend = ["python3", "-m", "dynamo.frontend", "--router-mode", router_mode]
    commands = {"frontend": frontend}
    components: list[dict[str, Any]] = [
        {
            "name": "frontend",
            "type": "frontend",
            "replicas": 1,
            "podTemplate": {"spec": {"containers": [_container(img, frontend, None)]}},
        }
    ]
    gpus = str(recipe.parallel.tp * recipe.parallel.pp)
    for role, replicas in roles.items():
        key = f"{role}.yaml"
        argv = ["python3", "-m", "dynamo.trtllm", "--model", model, "--served-model-name", served]
        argv += ["--extra-engine-args", f"{ENGINE_DIR}/{key}"]
        if disagg:
            argv += ["--disaggregation-mode", role]
        if router_mode == "kv":
            argv.append("--publish-kv-events")
        commands[role] = argv
        main = _container(img, argv, hf_token_secret)
        main["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
        main["volumeMounts"] = [
            {"name": "engine", "mountPath": f"{ENGINE_DIR}/{key}", "subPath": key, "readOnly": True}
        ]
        components.append(
            {
                "name": role,
                "type": role,
                "replicas": replicas,
                "podTemplate": {
                    "spec": {
                        "containers": [main],
                        "volumes": [{"name": "engine", "configMap": {"name": f"{name}-engine"}}],
                    }
                },
            }
        )
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/managed-by": "sdtk"}
    meta = {"name": name, "namespace": namespace, "labels": labels}
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {**meta, "name": f"{name}-engine"},
        "data": yamls,
    }
    dgd = {
        "apiVersion": "nvidia.com/v1beta1",
        "kind": "DynamoGraphDeployment",
        "metadata": meta,
        "spec": {"backendFramework": "trtllm", "components": components},
    }
    notes.append(
        "dynamo.trtllm exports no speculative acceptance metric (dynamo/trtllm/metrics.py 17-32): "
        "sdtk_spec_* come from sdtk's own workers (`--target dynamo` locally), not from these pods"
    )
    return DgdPlan(
        name=name,
        namespace=namespace,
        recipe_name=recipe.display_name,
        mode=recipe.mode,
        image=img,
        disagg=disagg,
        model=model,
        served_name=served,
        trtllm_version=DYNAMO_TRTLLM,
        engine_yamls=yamls,
        commands=commands,
        manifests=[configmap, dgd],
        notes=notes,
    )


def _notes_md(plan: DgdPlan, checked: list[str]) -> str:
    ns, name = plan.namespace, plan.name
    kind = "disaggregated: prefill and decode workers" if plan.disagg else "aggregated workers"
    comps = ", ".join(f"`{c}`" for c in plan.commands)
    lines = [
        f"# {name}: DynamoGraphDeployment of recipe `{plan.recipe_name}` (sdtk {__version__})",
        "",
        f"- **Layout:** NVIDIA Dynamo {DYNAMO_VERSION}, {kind}; components {comps}.",
        f"- Image `{plan.image}` (TensorRT-LLM {plan.trtllm_version}); the workers download `{plan.model}` "
        f"and serve it as `{plan.served_name}` on the frontend's OpenAI API (port 8000 in the pod).",
        f"- Engine YAML: ConfigMap `{name}-engine` ({', '.join(plan.engine_yamls)}), mounted at {ENGINE_DIR}/ "
        "with subPath; `speculative_config` is the same on every worker role.",
        "- Validated offline: " + "; ".join(checked),
        "",
        "## Install the Dynamo operator (once per cluster)",
        "",
        "```bash",
        "export NAMESPACE=dynamo-system",
        f"export RELEASE_VERSION={DYNAMO_VERSION}",
        "# CRDs: releases that publish a separate chart (ai-dynamo/dynamo install-k8s.sh) install it first",
        'helm fetch "https://helm.ngc.nvidia.com/nvidia/ai-dynamo/charts/dynamo-crds-${RELEASE_VERSION}.tgz" \\',
        '  && helm upgrade -i dynamo-crds "dynamo-crds-${RELEASE_VERSION}.tgz" --namespace default',
        'helm fetch "https://helm.ngc.nvidia.com/nvidia/ai-dynamo/charts/dynamo-platform-${RELEASE_VERSION}.tgz"',
        'helm upgrade -i dynamo-platform "dynamo-platform-${RELEASE_VERSION}.tgz" \\',
        '  --namespace "$NAMESPACE" --create-namespace',
        "kubectl get crd dynamographdeployments.nvidia.com",
        "```",
        "",
        "## Apply",
        "",
        "```bash",
        f"kubectl create namespace {ns} --dry-run=client -o yaml | kubectl apply -f -",
        f"kubectl -n {ns} create secret generic hf-token --from-literal=token=$HF_TOKEN   # gated hub models",
        f"kubectl apply -f {name}.yaml",
        f"kubectl -n {ns} get dgd {name}           # Ready column",
        f"kubectl -n {ns} port-forward svc/{name}-frontend 8000:8000",
        f"sdtk validate --openai --url http://127.0.0.1:8000 --model {plan.served_name}",
        "```",
        "",
        "## Unverified",
        "",
        "- Rendered and schema-checked offline only: not applied to a cluster by sdtk's tests.",
        f"- The frontend Service name `{name}-frontend` and port 8000 follow the operator's defaults "
        "as documented, not observed here.",
        "- Whether this release still publishes a separate `dynamo-crds` chart (older ones did; the platform "
        "chart may carry the CRDs).",
        f"- Disaggregated: `cache_transceiver_config` backend {TRANSCEIVER_BACKEND} and "
        "`max_tokens_in_buffer` = the recipe's max_seq_len follow NVIDIA's Llama-4 EAGLE example.",
    ]
    if plan.notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in plan.notes]
    return "\n".join(lines) + "\n"


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the ConfigMap's engine YAML) as literal blocks."""


def _str(dumper: yaml.SafeDumper, data: str) -> yaml.Node:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str)


def write_dgd(plan: DgdPlan, out_dir: Path | str, *, k8s_version: str | None = None) -> list[Path]:
    """Validate the objects offline (toolkit.ops.manifests), then write `<name>.yaml` and NOTES.md."""
    from toolkit.ops.manifests import DEFAULT_K8S_VERSION, validate_all

    checked = validate_all(plan.manifests, k8s_version or DEFAULT_K8S_VERSION)
    out = Path(out_dir)
    header = (
        f"# Rendered by sdtk {__version__} for recipe {plan.recipe_name} (namespace {plan.namespace}).\n"
        f"# NVIDIA Dynamo {DYNAMO_VERSION} DynamoGraphDeployment; needs the Dynamo operator (NOTES.md).\n"
        "# Do not edit by hand: re-render with `sdtk deploy RECIPE --target k8s --engine dynamo`.\n"
    )
    text = header + "".join(
        "---\n" + yaml.dump(o, Dumper=_Dumper, sort_keys=False, width=100) for o in plan.manifests
    )
    written = {out / f"{plan.name}.yaml": text, out / "NOTES.md": _notes_md(plan, checked)}
    return [atomic_write(path, body) for path, body in written.items()]
