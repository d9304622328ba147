"""Kubernetes manifests: schema validation (offline), probes/ports/resources from the recipe, layouts."""

from __future__ import annotations

import copy
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from toolkit.containers import images
from toolkit.errors import CompatError, UsageError
from toolkit.ops.k8s import HPA_PENDING, HPA_WAITING, k8s_name, load_manifests, plan_k8s, render_k8s
from toolkit.ops.layout import rank_commands
from toolkit.ops.manifests import ManifestError, validate_all, validate_manifest
from toolkit.recipe import bundled_recipes, load_recipe, parse_recipe

kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is not installed (the ops extra)")

# The oldest Kubernetes sdtk targets, and the newest schemas kubernetes-validate ships.
K8S_VERSIONS = ["1.29", kv.utils.latest_version()]


def by_kind(objs: list[dict], kind: str) -> list[dict]:
    return [o for o in objs if o["kind"] == kind]


def one(objs: list[dict], kind: str) -> dict:
    found = by_kind(objs, kind)
    assert len(found) == 1, f"expected one {kind}, got {[o['metadata']['name'] for o in found]}"
    return found[0]


def container(pod_spec: dict, name: str = "triton") -> dict:
    return next(c for c in pod_spec["containers"] if c["name"] == name)


def configmap_file(objs: list[dict], name: str) -> str:
    return one(objs, "ConfigMap")["data"][name]


def mpirun_argv_in(script: str) -> list[str]:
    """The `exec mpirun ...` command of launch.sh, as argv ("$HOSTLIST" left as a word)."""
    joined = script.replace("\\\n", " ")
    line = [ln for ln in joined.splitlines() if ln.strip().startswith("exec ")][-1]  # workers: exec sleep
    return shlex.split(line.strip())[1:]


def bash_syntax_ok(tmp_path, name: str, text: str) -> None:
    p = tmp_path / name
    p.write_text(text)
    r = subprocess.run(["bash", "-n", str(p)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


# --------------------------------------------------------------------------- single node


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_single_node_tp8_is_a_deployment_that_validates(recipe_tp8, tmp_path, version):
    paths = render_k8s(
        recipe_tp8, namespace="llm", replicas=2, out_dir=tmp_path, validate=True, k8s_version=version
    )
    core = load_manifests(tmp_path / "llama-8b-tp8.yaml")
    monitoring = load_manifests(tmp_path / "monitoring" / "servicemonitor.yaml")
    assert validate_all(core + monitoring, version)
    kinds = sorted(o["kind"] for o in core)
    assert kinds == sorted(
        ["ConfigMap", "PersistentVolumeClaim", "Service", "Deployment", "HorizontalPodAutoscaler"]
    )
    assert all(o["metadata"]["namespace"] == "llm" for o in core + monitoring)
    assert {p.name for p in paths} >= {
        "llama-8b-tp8.yaml",
        "servicemonitor.yaml",
        "NOTES.md",
        "prometheus-adapter-values.yaml",
        "grafana-dashboard.json",
        "Dockerfile",
    }
    assert not list(tmp_path.rglob("*.incomplete"))


def test_single_node_probes_ports_and_resources_follow_the_recipe(recipe_tp8):
    plan = plan_k8s(recipe_tp8, replicas=1)
    dep = one(plan.manifests, "Deployment")
    spec = dep["spec"]["template"]["spec"]
    triton = container(spec)
    sv = recipe_tp8.serving
    assert {p["name"]: p["containerPort"] for p in triton["ports"]} == {
        "http": sv.http_port,
        "grpc": sv.grpc_port,
        "metrics": sv.metrics_port,
    }
    assert triton["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": sv.http_port}
    assert triton["startupProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": sv.http_port}
    # liveness: the stub check of `sdtk status` (/v2/health/* stays 200 when a stub dies)
    assert triton["livenessProbe"]["exec"]["command"] == [
        "python3",
        "/sdtk/stubcheck.py",
        "/models/llama-8b-tp8/triton_repo",
        "--url",
        f"http://127.0.0.1:{sv.http_port}",
    ]
    startup = triton["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 3600  # generous for engine load
    assert triton["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert triton["resources"]["requests"]["nvidia.com/gpu"] == 8
    # /dev/shm: an in-memory emptyDir with a size limit
    vols = {v["name"]: v for v in spec["volumes"]}
    assert vols["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "20Gi"}
    assert {"name": "dshm", "mountPath": "/dev/shm"} in triton["volumeMounts"]
    # models PVC + prepare init container that runs sdtk build + render
    assert (
        vols["models"]["persistentVolumeClaim"]["claimName"]
        == one(plan.manifests, "PersistentVolumeClaim")["metadata"]["name"]
    )
    init = spec["initContainers"][0]
    assert init["name"] == "prepare" and init["resources"]["limits"]["nvidia.com/gpu"] == 8
    prepare = configmap_file(plan.manifests, "prepare.sh")
    assert "sdtk build /sdtk/recipe.yaml --workdir /models" in prepare
    assert "sdtk deploy /sdtk/recipe.yaml --workdir /models --render-only" in prepare.replace("\\\n  ", "")
    # the Service exposes the same three ports by name, and selects the pods
    svc = one(plan.manifests, "Service")
    assert {p["name"]: (p["port"], p["targetPort"]) for p in svc["spec"]["ports"]} == {
        "http": (9000, "http-proxy"),  # through the proxy sidecar
        "grpc": (9001, "grpc"),
        "metrics": (9002, "metrics"),
    }
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    # the ServiceMonitor scrapes the metrics port of that Service
    sm = one(plan.monitoring, "ServiceMonitor")
    assert sm["spec"]["endpoints"][0]["port"] == "metrics"
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    # one replica and no autoscaling beyond it: a ReadWriteOnce volume is enough
    plan1 = plan_k8s(recipe_tp8, replicas=1, max_replicas=1)
    assert one(plan1.manifests, "PersistentVolumeClaim")["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert not by_kind(plan1.manifests, "HorizontalPodAutoscaler")


def test_launch_script_is_the_leader_mode_layout(recipe_tp8, tmp_path):
    plan = plan_k8s(recipe_tp8)
    launch = configmap_file(plan.manifests, "launch.sh")
    bash_syntax_ok(tmp_path, "launch.sh", launch)
    bash_syntax_ok(tmp_path, "prepare.sh", configmap_file(plan.manifests, "prepare.sh"))
    argv = mpirun_argv_in(launch)
    assert argv[:2] == ["mpirun", "--allow-run-as-root"]
    ranks = rank_commands(argv)
    assert len(ranks) == 8
    assert "--http-port=9000" in ranks[0] and "--metrics-port=9002" in ranks[0]
    for rank in ranks[1:]:
        assert not any(a.startswith(("--http-port", "--grpc-port", "--metrics-port")) for a in rank)
        assert "--model-control-mode=explicit" in rank and "--load-model=tensorrt_llm" in rank
    prefixes = [next(a for a in r if "shm-region-prefix-name" in a) for r in ranks]
    assert len(set(prefixes)) == 8


def test_hpa_targets_the_workload_on_a_queue_metric_served_by_the_adapter(recipe_tp8, tmp_path):
    render_k8s(recipe_tp8, out_dir=tmp_path, replicas=1, max_replicas=3)
    core = load_manifests(tmp_path / "llama-8b-tp8.yaml")
    hpa = one(core, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "llama-8b-tp8",
    }
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (1, 3)
    metric = hpa["spec"]["metrics"][0]
    assert metric["type"] == "Pods" and metric["pods"]["metric"]["name"] == HPA_WAITING  # engine backend
    adapter = yaml.safe_load((tmp_path / "extras" / "prometheus-adapter-values.yaml").read_text())
    rule = adapter["rules"]["custom"][0]
    assert rule["name"]["as"] == HPA_WAITING
    assert 'request_type="waiting"' in rule["seriesQuery"]
    assert rule["resources"]["overrides"]["pod"] == {"resource": "pod"}


def test_llmapi_uses_one_process_and_the_pending_request_metric():
    r = load_recipe("llama-3.1-8b-eagle3", ["trtllm_version=1.1.0"])
    plan = plan_k8s(r)
    assert plan.topology.backend == "llmapi" and plan.topology.ranks == 1
    assert plan.hpa_metric == HPA_PENDING
    launch = configmap_file(plan.manifests, "launch.sh")
    assert "exec /opt/tritonserver/bin/tritonserver" in launch and "mpirun" not in launch
    validate_all(plan.manifests + plan.monitoring)


def test_reference_backend_requests_no_gpus_and_pins_local_paths():
    r = load_recipe("tiny-eagle3")
    plan = plan_k8s(r, replicas=1, max_replicas=1)
    # Its requests queue in the in-flight batcher, which exports request_type="waiting" (the
    # served batching test reads it off a live /metrics); Triton's pending count stays 0.
    assert plan_k8s(r, replicas=1, max_replicas=3).hpa_metric == HPA_WAITING
    spec = one(plan.manifests, "Deployment")["spec"]["template"]["spec"]
    assert container(spec)["resources"] == {}
    assert any("CPU" in n for n in plan.notes)
    recipe_yaml = yaml.safe_load(configmap_file(plan.manifests, "recipe.yaml"))
    assert recipe_yaml["name"] == "tiny-eagle3"
    assert recipe_yaml["models"]["target"]["path"].startswith("/")
    assert any("local path" in n for n in plan.notes)
    # the recipe shipped to the pod is still a valid recipe
    assert parse_recipe(recipe_yaml).display_name == "tiny-eagle3"
    validate_all(plan.manifests + plan.monitoring)


def test_http_proxy_sidecar_caps_bodies_and_refuses_form_encoded_ones(recipe_tp8, tmp_path):
    """Issue 23, finding 1: one large form-encoded body kills tritonserver (server#5840,
    libevhtp#118), so the Service's http port reaches Triton through nginx, which refuses such
    bodies and caps the size. Without the proxy the objects are the same, less the sidecar."""
    plan = plan_k8s(recipe_tp8, replicas=1, http_proxy_max_body="8m")
    spec = one(plan.manifests, "Deployment")["spec"]["template"]["spec"]
    proxy = container(spec, "http-proxy")
    assert proxy["image"].startswith("nginxinc/nginx-unprivileged:")
    assert proxy["ports"] == [{"name": "http-proxy", "containerPort": 9480, "protocol": "TCP"}]
    assert proxy["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": 9480}
    svc = one(plan.manifests, "Service")
    assert next(p for p in svc["spec"]["ports"] if p["name"] == "http")["targetPort"] == "http-proxy"
    conf = configmap_file(plan.manifests, "nginx.conf")
    assert "listen 9480;" in conf and "client_max_body_size 8m;" in conf
    assert "proxy_pass http://127.0.0.1:9000;" in conf and "proxy_buffering off;" in conf
    assert '"~*application/x-www-form-urlencoded" 1;' in conf and "return 415" in conf
    assert "{{" not in conf and "{%" not in conf
    validate_all(plan.manifests + plan.monitoring)

    bare = plan_k8s(recipe_tp8, replicas=1, http_proxy=False)
    assert [
        c["name"] for c in one(bare.manifests, "Deployment")["spec"]["template"]["spec"]["containers"]
    ] == ["triton"]
    assert "nginx.conf" not in one(bare.manifests, "ConfigMap")["data"]
    assert (
        next(p for p in one(bare.manifests, "Service")["spec"]["ports"] if p["name"] == "http")["targetPort"]
        == "http"
    )
    with pytest.raises(UsageError, match="nginx size"):
        plan_k8s(recipe_tp8, http_proxy_max_body="lots")


def test_liveness_probe_runs_the_status_stub_check_on_its_own(recipe_tp8, tmp_path):
    """Issue 23, finding 3: the probe's script is toolkit/server/stubcheck.py (what `sdtk status`
    uses), shipped in the ConfigMap, and it runs without sdtk: isolated (-I), from another
    directory, it fails for a Python model without a live stub and passes for a repository
    without Python models. (tests/stress/test_faults.py runs it against a killed stub.)"""
    from toolkit.server import stubcheck

    plan = plan_k8s(recipe_tp8, replicas=1)
    script = configmap_file(plan.manifests, "stubcheck.py")
    assert script == (Path(stubcheck.__file__)).read_text(encoding="utf-8")
    assert "import toolkit" not in script and "from toolkit" not in script
    path = tmp_path / "probe" / "stubcheck.py"
    path.parent.mkdir()
    path.write_text(script)
    repo = tmp_path / "repo"
    (repo / "preprocessing" / "1").mkdir(parents=True)
    (repo / "preprocessing" / "config.pbtxt").write_text('name: "preprocessing"\nbackend: "python"\n')
    (repo / "tensorrt_llm").mkdir()
    (repo / "tensorrt_llm" / "config.pbtxt").write_text('name: "tensorrt_llm"\nbackend: "tensorrtllm"\n')
    r = subprocess.run(
        [sys.executable, "-I", str(path), str(repo)], capture_output=True, text=True, cwd=tmp_path
    )
    assert r.returncode == 1 and "preprocessing" in r.stdout and "tensorrt_llm" not in r.stdout, r
    (repo / "preprocessing" / "config.pbtxt").unlink()
    r = subprocess.run(
        [sys.executable, "-I", str(path), str(repo)], capture_output=True, text=True, cwd=tmp_path
    )
    assert r.returncode == 0, r
    r = subprocess.run(
        [sys.executable, "-I", str(path), str(repo), "--url", "http://127.0.0.1:9"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert r.returncode == 1 and "not live" in r.stdout, r


def test_monitor_sidecar_is_scraped_too(recipe_tp8):
    plan = plan_k8s(recipe_tp8, monitor_sidecar=True)
    spec = one(plan.manifests, "Deployment")["spec"]["template"]["spec"]
    mon = container(spec, "sdtk-monitor")
    assert mon["command"][:2] == ["sdtk", "monitor"]
    assert mon["command"][mon["command"].index("--url") + 1] == "http://127.0.0.1:9000"
    assert [e["port"] for e in one(plan.monitoring, "ServiceMonitor")["spec"]["endpoints"]] == [
        "metrics",
        "sdtk-metrics",
    ]
    assert "sdtk-metrics" in [p["name"] for p in one(plan.manifests, "Service")["spec"]["ports"]]
    validate_all(plan.manifests + plan.monitoring)


# --------------------------------------------------------------------------- multi node


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_multi_node_tp8_pp2_is_a_leaderworkerset_that_validates(recipe_tp8_pp2, tmp_path, version):
    render_k8s(recipe_tp8_pp2, out_dir=tmp_path, validate=True, k8s_version=version)
    core = load_manifests(tmp_path / "llama-70b-tp8pp2.yaml")
    validate_all(core, version)
    lws = one(core, "LeaderWorkerSet")
    lwt = lws["spec"]["leaderWorkerTemplate"]
    assert lwt["size"] == 2 and lwt["restartPolicy"] == "RecreateGroupOnPodRestart"
    leader, worker = lwt["leaderTemplate"]["spec"], lwt["workerTemplate"]["spec"]
    assert container(leader)["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert container(worker)["resources"]["limits"]["nvidia.com/gpu"] == 8
    # only the leader (rank 0) serves: ports and probes there, none on workers
    assert "readinessProbe" in container(leader) and "ports" in container(leader)
    assert "readinessProbe" not in container(worker) and "ports" not in container(worker)
    assert {e["name"]: e.get("value") for e in container(worker)["env"]}["SDTK_ROLE"] == "worker"
    # kubectl exec as mpirun's rsh agent: RBAC for pods/exec, bound to the pods' service account
    role = one(core, "Role")
    assert {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]} in role["rules"]
    assert leader["serviceAccountName"] == one(core, "ServiceAccount")["metadata"]["name"]
    hpa = one(core, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"]["kind"] == "LeaderWorkerSet"
    assert one(core, "PersistentVolumeClaim")["spec"]["accessModes"] == ["ReadWriteMany"]
    assert "LeaderWorkerSet" in (tmp_path / "llama-70b-tp8pp2.yaml").read_text().splitlines()[1]
    assert "kubectl" in (tmp_path / "extras" / "Dockerfile").read_text()


def test_multi_node_launch_spans_the_nodes_in_leader_mode(recipe_tp8_pp2, tmp_path):
    plan = plan_k8s(recipe_tp8_pp2)
    launch = configmap_file(plan.manifests, "launch.sh")
    for name in ("launch.sh", "prepare.sh", "kubexec.sh"):
        bash_syntax_ok(tmp_path, name, configmap_file(plan.manifests, name))
    argv = mpirun_argv_in(launch)
    assert argv[argv.index("--host") + 1] == "$HOSTLIST"
    assert argv[argv.index("--mca") + 1 : argv.index("--mca") + 3] == ["plm_rsh_agent", "/sdtk/kubexec.sh"]
    assert "printf '%s:8,'" in launch  # 8 slots on each of the 2 hosts
    ranks = rank_commands(argv)
    assert len(ranks) == 16
    assert sum(any(a.startswith("--http-port") for a in r) for r in ranks) == 1
    assert all("--load-model=tensorrt_llm" in r for r in ranks[1:])
    assert len({a for r in ranks for a in r if "shm-region-prefix-name" in a}) == 16


def test_multi_node_statefulset_fallback_validates(recipe_tp8_pp2):
    plan = plan_k8s(recipe_tp8_pp2, multinode="statefulset", replicas=2)
    validate_all(plan.manifests + plan.monitoring)
    sts = {o["metadata"]["name"]: o for o in by_kind(plan.manifests, "StatefulSet")}
    assert sts["llama-70b-tp8pp2-leader"]["spec"]["replicas"] == 2
    assert sts["llama-70b-tp8pp2-worker"]["spec"]["replicas"] == 2  # (nodes - 1) per group
    headless = [s for s in by_kind(plan.manifests, "Service") if s["spec"].get("clusterIP") == "None"]
    assert (
        len(headless) == 1
        and sts["llama-70b-tp8pp2-leader"]["spec"]["serviceName"] == headless[0]["metadata"]["name"]
    )
    assert not by_kind(plan.manifests, "HorizontalPodAutoscaler")
    assert 'HOSTS+=(llama-70b-tp8pp2-worker-"$((group' in configmap_file(plan.manifests, "launch.sh")


def test_layouts_that_cannot_span_nodes_are_refused(recipe_tp8_pp2):
    data = recipe_tp8_pp2.model_dump(mode="json", exclude_none=True)
    with pytest.raises(UsageError, match="not a multiple of --gpus-per-node"):
        plan_k8s(recipe_tp8_pp2, gpus_per_node=6)
    llmapi = copy.deepcopy(data) | {"backend": "llmapi"}
    with pytest.raises(UsageError, match="cannot span nodes"):
        plan_k8s(parse_recipe(llmapi))
    dt = copy.deepcopy(data) | {
        "models": {
            "target": "meta-llama/Llama-3.3-70B-Instruct",
            "draft": "meta-llama/Llama-3.2-1B-Instruct",
        },
        "speculative": {"mode": "draft_target", "max_draft_len": 4},
        "serving": {"decoupled": False},
    }
    with pytest.raises(UsageError, match="orchestrator mode"):
        plan_k8s(parse_recipe(dt))


# --------------------------------------------------------------------------- validation catches mistakes


def test_strict_validation_rejects_unknown_and_invalid_fields(recipe_tp8, recipe_tp8_pp2):
    dep = copy.deepcopy(one(plan_k8s(recipe_tp8).manifests, "Deployment"))
    dep["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGett"] = {}
    with pytest.raises(ManifestError, match="Deployment"):
        validate_manifest(dep)
    lws = copy.deepcopy(one(plan_k8s(recipe_tp8_pp2).manifests, "LeaderWorkerSet"))
    bad = copy.deepcopy(lws)
    bad["spec"]["leaderWorkerTemplate"]["restartPolicy"] = "Always"
    with pytest.raises(ManifestError, match="restartPolicy|Always"):
        validate_manifest(bad)
    bad = copy.deepcopy(lws)
    bad["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["imagePullPolicyy"] = "x"
    with pytest.raises(ManifestError):
        validate_manifest(bad)
    sm = copy.deepcopy(one(plan_k8s(recipe_tp8).monitoring, "ServiceMonitor"))
    sm["spec"]["endpoints"][0]["interval"] = "fifteen"
    with pytest.raises(ManifestError, match="ServiceMonitor"):
        validate_manifest(sm)


def test_every_bundled_recipe_renders_valid_manifests():
    rendered = 0
    for name, path in bundled_recipes().items():
        recipe = load_recipe(path)
        # every bundled recipe declares a version a verified NGC container carries (1.2.1: 26.07), or none
        plan = plan_k8s(recipe)
        validate_all(plan.manifests + plan.monitoring)
        assert plan.name == k8s_name(name)
        rendered += 1
    assert rendered >= 10


# --------------------------------------------------------------------------- images and options


def test_image_table_pins_trtllm_versions_to_ngc_containers():
    """Triton's compatibility matrix (server docs/introduction/compatibility.md @r26.07, 819ee37):
    1.1.0 in 25.12-26.02 (the newest wins), 1.2.0 in 26.03, 1.2.1 in 26.04-26.07."""
    assert images.image_for("1.2.1") == "nvcr.io/nvidia/tritonserver:26.07-trtllm-python-py3"
    assert images.image_for("1.2.0") == "nvcr.io/nvidia/tritonserver:26.03-trtllm-python-py3"
    assert images.image_for("1.1.0") == "nvcr.io/nvidia/tritonserver:26.02-trtllm-python-py3"
    assert images.trtllm_version_of("nvcr.io/nvidia/tritonserver:25.12-trtllm-python-py3") == "1.1.0"
    assert images.trtllm_version_of("nvcr.io/nvidia/tritonserver:26.05-trtllm-python-py3") == "1.2.1"
    assert images.image_for("1.0.0") == "nvcr.io/nvidia/tritonserver:25.10-trtllm-python-py3"
    assert images.image_for("0.21.0") == "nvcr.io/nvidia/tritonserver:25.08-trtllm-python-py3"
    assert images.trtllm_version_of("nvcr.io/nvidia/tritonserver:25.09-trtllm-python-py3") == "1.0.0"
    assert images.trtllm_version_of("my.registry/sdtk:1") is None
    for row in images.table():
        assert images.trtllm_version_of(row["image"]) == row["trtllm"]
    # the 1.3 line ships only in NVIDIA's Dynamo container so far (server issue #8805)
    with pytest.raises(UsageError, match="no verified NGC Triton container") as e:
        images.image_for("1.3.0")
    assert "--image" in e.value.hint and "1.2.1 (26.07) is the newest" in str(e.value) and "#8805" in str(e.value)


def test_image_choice_drives_the_backend_check():
    with pytest.raises(UsageError, match="TensorRT-LLM 1.3.0"):
        plan_k8s(load_recipe("llama-3.1-8b-eagle3", ["trtllm_version=1.3.0"]))  # no verified container
    eagle3 = load_recipe("llama-3.1-8b-eagle3")  # pins 1.2.1, which 26.04-26.07 carry
    assert plan_k8s(eagle3).image.endswith(":26.07-trtllm-python-py3")
    assert "TensorRT-LLM 1.2.1" in plan_k8s(eagle3).image_why
    # 25.08 carries TensorRT-LLM 0.21.0, older than the LLM-API path EAGLE-3 needs
    with pytest.raises(CompatError):
        plan_k8s(eagle3, image="nvcr.io/nvidia/tritonserver:25.08-trtllm-python-py3")
    custom = plan_k8s(load_recipe("llama-3.1-8b-eagle3"), image="registry.example/sdtk-triton:0.1.0")
    assert custom.image == "registry.example/sdtk-triton:0.1.0"
    assert not any("stock NGC image" in n for n in custom.notes)


def test_prepare_modes(recipe_tp8):
    plan = plan_k8s(recipe_tp8, prepare="pull", pull_from="hf://acme/llama-8b-tp8-engines@v1")
    prepare = configmap_file(plan.manifests, "prepare.sh")
    assert "snapshot_download" in prepare and "acme/llama-8b-tp8-engines" in prepare and " v1 " in prepare
    assert "sdtk build" not in prepare
    plan = plan_k8s(recipe_tp8, prepare="pull", pull_from="https://example.com/engines.tar.gz")
    assert "curl -fL" in configmap_file(plan.manifests, "prepare.sh")
    plan = plan_k8s(recipe_tp8, prepare="none")
    assert "prepare=none" in configmap_file(plan.manifests, "prepare.sh")
    with pytest.raises(UsageError, match="--pull-from"):
        plan_k8s(recipe_tp8, prepare="pull")
    with pytest.raises(UsageError, match="neither"):
        plan_k8s(recipe_tp8, prepare="pull", pull_from="s3://bucket/x.tar")


def test_bad_options_are_usage_errors(recipe_tp8):
    with pytest.raises(UsageError, match="namespace"):
        plan_k8s(recipe_tp8, namespace="Bad_NS")
    with pytest.raises(UsageError, match="replicas"):
        plan_k8s(recipe_tp8, replicas=0)
    with pytest.raises(UsageError, match="max-replicas"):
        plan_k8s(recipe_tp8, replicas=3, max_replicas=2)
    with pytest.raises(UsageError, match="quantity"):
        plan_k8s(recipe_tp8, shm_size="lots")
    assert k8s_name("Qwen2.5_coder.7B") == "qwen2-5-coder-7b"
    assert k8s_name("7b-model").startswith("sdtk-")


def test_options_are_closed_and_the_layers_compose(tmp_path):
    """options → objects → render: plan_k8s is build_objects plus the text files; a typo in an
    option is named, with a did-you-mean."""
    from toolkit.ops.k8s import K8sOptions, build_objects

    rec = load_recipe("tiny-baseline")
    with pytest.raises(UsageError, match="unknown Kubernetes option 'replica'; did you mean 'replicas'"):
        plan_k8s(rec, replica=2)
    opts = K8sOptions(replicas=2, namespace="ns1")
    objects = build_objects(rec, opts)
    plan = plan_k8s(rec, opts)
    assert objects.manifests == plan.manifests and objects.extras == {}
    assert list(plan.extras) == ["prometheus-adapter-values.yaml", "Dockerfile", "NOTES.md"]
    assert plan_k8s(rec, namespace="ns1", replicas=2).manifests == plan.manifests


def test_notes_never_claim_a_version_the_image_is_not_known_to_carry(tmp_path):
    """An --image whose tag is not in the verified table (26.11: no trtllm-python-py3 row in the matrix
    at r26.07 or r26.08) is rendered for the recipe's version, and NOTES.md says that is unverified;
    it used to say "(carries TensorRT-LLM <recipe version>)"."""
    recipe = load_recipe("llama-3.1-8b-eagle3", ["trtllm_version=1.2.1"])
    plan = plan_k8s(recipe, image="nvcr.io/nvidia/tritonserver:26.11-trtllm-python-py3")
    notes = plan.extras["NOTES.md"]
    assert "carries TensorRT-LLM" not in notes
    assert "container 26.11 is not in sdtk's verified table" in notes
    assert "rendered for the recipe's trtllm_version 1.2.1, which this image is not known to carry" in notes
    custom = plan_k8s(recipe, image="registry.example/sdtk-triton:1")
    assert "not an NGC trtllm-python-py3 image" in custom.image_why
    assert "carries TensorRT-LLM" not in custom.image_why
    verified = plan_k8s(recipe, image="nvcr.io/nvidia/tritonserver:26.05-trtllm-python-py3")
    assert "carries TensorRT-LLM 1.2.1" in verified.image_why


def test_engine_path_on_1_2_renders_with_a_deprecation_warning_and_1_3_is_refused():
    """The engine path ships in 26.03-26.07 (TensorRT-LLM 1.2.x), deprecated (NVIDIA/TensorRT-LLM
    PR #11723); the 1.3 line removed it (PRs #15907, #15918)."""
    medusa = load_recipe("vicuna-7b-medusa")
    plan = plan_k8s(medusa)
    assert plan.image.endswith(":26.07-trtllm-python-py3") and plan.topology.backend == "engine"
    assert "WARNING" in plan.extras["NOTES.md"] and "#11723" in plan.extras["NOTES.md"]
    on_13 = load_recipe("vicuna-7b-medusa", ["trtllm_version=1.3.0"])
    with pytest.raises(CompatError, match="#15907") as e:
        plan_k8s(on_13, image="registry.example/sdtk-triton:1.3")
    assert "#15918" in str(e.value) and "eagle3" in e.value.hint and "ngram" in e.value.hint
