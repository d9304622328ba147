"""`sdtk deploy RECIPE --target k8s --engine dynamo [--disagg]`: the DynamoGraphDeployment render.

No cluster and no Dynamo install are needed: the objects are validated offline, the DGD against the
schema transcribed from ai-dynamo/dynamo's v1beta1 Go types (toolkit/ops/schemas/, cited there) and
its pod templates against the core PodTemplate schema; the ConfigMap with the core schemas.

Upstream facts the assertions hold the render to (ai-dynamo 1.6.1 wheel
`dynamo/profiler/templates/dgd/trtllm/{agg,disagg}.yaml`; ai-dynamo/dynamo @b6f88b1f
`examples/backends/trtllm/engine_configs/llama4/eagle/eagle_{prefill,decode}.yaml`;
`examples/backends/trtllm/deploy/v1beta1/agg-with-config.yaml` @2ac51dd):
- components typed frontend / worker, or frontend / prefill / decode; container `main`, image
  `nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:1.6.1`, `python3 -m dynamo.trtllm` with
  `--extra-engine-args` pointing at a ConfigMap key mounted with subPath;
- disaggregated: `--disaggregation-mode prefill|decode` and the same speculative_config on both.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from cli_support import sdtk

from toolkit.dynamo.k8s import IMAGE, plan_dgd, write_dgd
from toolkit.errors import UsageError
from toolkit.ops.k8s import load_manifests
from toolkit.ops.manifests import ManifestError, validate_manifest
from toolkit.recipe import load_recipe

ROOT = Path(__file__).resolve().parents[2]
HUB_RECIPE = ROOT / "recipes" / "llama-3.1-8b-eagle3.yaml"  # hub ids: what the pods can download
SPEC = {
    # TensorRT-LLM 1.3 line (Dynamo 1.6.1 pins 1.3.0rc29): EAGLE-3 is `decoding_type: Eagle3` with
    # `speculative_model` (a hub id allowed), no eagle3_one_model (toolkit/build/llmapi.py's table).
    "decoding_type": "Eagle3",
    "max_draft_len": 3,
    "speculative_model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
}


@pytest.fixture(scope="module")
def recipe():
    return load_recipe(HUB_RECIPE)


def _render(recipe, out: Path, **kw) -> tuple[dict, dict, dict[str, dict]]:
    files = write_dgd(plan_dgd(recipe, **kw), out)
    assert sorted(p.name for p in files) == ["NOTES.md", "llama-3-1-8b-eagle3.yaml"]
    cm, dgd = load_manifests(out / "llama-3-1-8b-eagle3.yaml")
    assert cm["kind"] == "ConfigMap" and dgd["kind"] == "DynamoGraphDeployment"
    assert dgd["apiVersion"] == "nvidia.com/v1beta1"
    engine = {key: yaml.safe_load(text) for key, text in cm["data"].items()}
    return cm, dgd, engine


def _main(component: dict) -> dict:
    return next(c for c in component["podTemplate"]["spec"]["containers"] if c["name"] == "main")


def test_aggregated_render_validates_and_mounts_the_engine_yaml(recipe, tmp_path):
    cm, dgd, engine = _render(recipe, tmp_path, workers=2)
    assert validate_manifest(dgd).startswith("DynamoGraphDeployment v1beta1 schema")
    assert "Kubernetes" in validate_manifest(cm)
    comps = {c["name"]: c for c in dgd["spec"]["components"]}
    assert [(c["name"], c["type"], c["replicas"]) for c in dgd["spec"]["components"]] == [
        ("frontend", "frontend", 1),
        ("worker", "worker", 2),
    ]
    front = _main(comps["frontend"])
    assert front["image"] == IMAGE == "nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:1.6.1"
    assert front["command"] + front["args"] == [
        "python3",
        "-m",
        "dynamo.frontend",
        "--router-mode",
        "round-robin",
    ]
    worker = _main(comps["worker"])
    assert worker["command"] + worker["args"] == [
        "python3", "-m", "dynamo.trtllm",
        "--model", "meta-llama/Llama-3.1-8B-Instruct",
        "--served-model-name", "llama-3.1-8b-eagle3",
        "--extra-engine-args", "/sdtk/engine/worker.yaml",
    ]  # fmt: skip
    assert worker["volumeMounts"] == [
        {
            "name": "engine",
            "mountPath": "/sdtk/engine/worker.yaml",
            "subPath": "worker.yaml",
            "readOnly": True,
        }
    ]
    assert comps["worker"]["podTemplate"]["spec"]["volumes"] == [
        {"name": "engine", "configMap": {"name": cm["metadata"]["name"]}}
    ]
    assert worker["resources"] == {"limits": {"nvidia.com/gpu": "1"}}
    assert list(engine) == ["worker.yaml"]
    agg = engine["worker.yaml"]
    assert agg["speculative_config"] == SPEC
    assert agg["backend"] == "pytorch" and agg["max_seq_len"] == 8192 and agg["max_batch_size"] == 8
    notes = (tmp_path / "NOTES.md").read_text()
    assert "dynamo-platform" in notes and "helm" in notes and "## Unverified" in notes
    # the recipe's declared version, replaced by the image's
    assert f"declares TensorRT-LLM {recipe.trtllm_version}; the Dynamo 1.6.1 image carries 1.3.0rc29" in notes


def test_disaggregated_render_puts_the_same_speculation_on_prefill_and_decode(recipe, tmp_path):
    cm, dgd, engine = _render(recipe, tmp_path, disagg=True, workers=3, prefill_workers=2)
    validate_manifest(dgd)
    validate_manifest(cm)
    comps = {c["name"]: c for c in dgd["spec"]["components"]}
    assert {n: (c["type"], c["replicas"]) for n, c in comps.items()} == {
        "frontend": ("frontend", 1),
        "prefill": ("prefill", 2),
        "decode": ("decode", 3),
    }
    for role in ("prefill", "decode"):
        argv = _main(comps[role])["command"] + _main(comps[role])["args"]
        assert argv[argv.index("--extra-engine-args") + 1] == f"/sdtk/engine/{role}.yaml"
        assert argv[-2:] == ["--disaggregation-mode", role]
    prefill, decode = engine["prefill.yaml"], engine["decode.yaml"]
    assert prefill["speculative_config"] == decode["speculative_config"] == SPEC
    for cfg in (prefill, decode):  # as eagle_prefill.yaml / eagle_decode.yaml
        assert cfg["disable_overlap_scheduler"] is True
        assert cfg["cache_transceiver_config"] == {"backend": "UCX", "max_tokens_in_buffer": 8192}
    assert "cuda_graph_config" not in prefill and "cuda_graph_config" in decode


def test_the_schema_refuses_what_the_crd_refuses(recipe):
    dgd = plan_dgd(recipe).manifests[1]
    bad_type = copy.deepcopy(dgd)
    bad_type["spec"]["components"][1]["type"] = "router"
    no_main = copy.deepcopy(dgd)
    no_main["spec"]["components"][1]["podTemplate"]["spec"]["containers"][0]["name"] = "engine"
    twice = copy.deepcopy(dgd)
    twice["spec"]["components"][1]["name"] = "Frontend"
    unknown = copy.deepcopy(dgd)
    unknown["spec"]["components"][0]["services"] = {}
    bad_pod = copy.deepcopy(dgd)
    bad_pod["spec"]["components"][1]["podTemplate"]["spec"]["containers"][0]["volumeMount"] = []
    for obj, what in (
        (bad_type, "router"),
        (no_main, "containers: .*does not contain items"),  # a container named main
        (twice, "unique"),
        (unknown, "services"),
        (bad_pod, "volumeMount"),
    ):
        with pytest.raises(ManifestError, match=what):
            validate_manifest(obj)


def test_a_local_model_path_and_prefill_workers_without_disagg_are_refused(recipe):
    with pytest.raises(UsageError, match="local path"):
        plan_dgd(load_recipe(ROOT / "recipes" / "tiny-eagle3.yaml"))
    with pytest.raises(UsageError, match="--prefill-workers goes with --disagg"):
        plan_dgd(recipe, prefill_workers=2)


def test_dry_run_prints_frontend_and_worker_commands_with_the_engine_yaml():
    r = sdtk(
        "deploy",
        str(HUB_RECIPE),
        "--target",
        "k8s",
        "--engine",
        "dynamo",
        "--disagg",
        "--dry-run",
        timeout=180,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    out = r.stdout
    assert "python3 -m dynamo.frontend --router-mode round-robin" in out
    for role in ("prefill", "decode"):
        assert (
            "python3 -m dynamo.trtllm --model meta-llama/Llama-3.1-8B-Instruct --served-model-name "
            f"llama-3.1-8b-eagle3 --extra-engine-args /sdtk/engine/{role}.yaml --disaggregation-mode {role}"
        ) in out
        assert f"# --- /sdtk/engine/{role}.yaml" in out
    assert out.count("speculative_model: yuhuili/EAGLE3-LLaMA3.1-Instruct-8B") == 2


def test_local_dry_run_names_the_hub_id_as_the_workers_model():
    """`sdtk deploy RECIPE --target dynamo --dry-run` with a hub-id target hands dynamo.trtllm
    `--model <hub id>` (ai-dynamo 1.6.1 dynamo/trtllm/backend_args.py 44-56), not the printed
    model-source object."""
    r = sdtk(
        "deploy",
        str(HUB_RECIPE),
        "--target",
        "dynamo",
        "--dry-run",
        "--set",
        "trtllm_version=1.3.0",
        timeout=180,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "--model meta-llama/Llama-3.1-8B-Instruct " in r.stdout
    assert "repo=" not in r.stdout
