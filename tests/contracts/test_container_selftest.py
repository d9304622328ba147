"""`sdtk selftest --dry-run --container-root DIR`, per container (its layout facts).

Stand-in for the container: a directory tree built from `containers/<yy.mm>.json` with empty files at
the recorded paths (TensorRT-LLM and the NGC images are not available here). The dry run must print
every step's argv and resolve every path against that tree, for each container. The commands name
the in-container paths, which come from tensorrtllm_backend `dockerfile/Dockerfile.triton.trt_llm_backend`
(`WORKDIR /app`, `COPY …/examples examples`) and server `build.py` (`/opt/tritonserver`) at each tag.
"""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath

import pytest
from click.testing import CliRunner

from toolkit import containers
from toolkit.cli import cli
from toolkit.selftest import plan_modes

FACTS = containers.all_facts()


def make_tree(root: Path, facts: containers.ContainerFacts) -> Path:
    """Empty files at every recorded file path, directories at every recorded directory."""
    for d in facts.dirs():
        (root / PurePosixPath(d).relative_to("/")).mkdir(parents=True, exist_ok=True)
    for f in facts.files():
        p = root / PurePosixPath(f).relative_to("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("")
    return root


def run(tag: str, root: Path, *extra: str):
    return CliRunner().invoke(
        cli, ["selftest", "--dry-run", "--container", tag, "--container-root", str(root), "--json", *extra]
    )


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    for var in ("TRTLLM_EXAMPLES_DIR", "NVIDIA_TRITON_SERVER_VERSION", "TRITONSERVER", "TRTLLM_DIR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))


@pytest.mark.parametrize("tag", list(FACTS))
def test_dry_run_resolves_every_path_of_each_container(tag, tmp_path):
    facts = FACTS[tag]
    root = make_tree(tmp_path / "container", facts)
    r = run(tag, root)
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["ok"] and out["container"] == tag and out["trtllm_version"] == facts.trtllm_version.value
    want = plan_modes(facts.trtllm_version.value)
    assert [(row["mode"], row["backend"]) for row in out["rows"]] == want and want
    examples = facts.examples_dir.value
    for row in out["rows"]:
        assert row["ok"] and row["error"] is None, row
        assert row["steps"] and all(s.get("argv") or s.get("files") for s in row["steps"])
        assert row["launch_argv"] and facts.tritonserver.value in row["launch_argv"]
        for p in row["paths"]:
            assert p["found"] and Path(p["host"]) == root / PurePosixPath(p["path"]).relative_to("/")
        resolved = {p["path"] for p in row["paths"]}
        assert facts.tritonserver.value in resolved and facts.python.value in resolved
        if row["backend"] == "engine":
            convs = [s["argv"] for s in row["steps"] if s["name"].startswith("convert-")]
            assert convs and all(a[0] == "python3" and a[1].startswith(examples + "/") for a in convs)
            assert {a[1] for a in convs} <= resolved
            assert facts.tensorrtllm_backend_dir.value in resolved
        if row["backend"] == "llmapi":
            assert facts.llmapi_model_py.value in resolved


def test_dry_run_names_a_missing_converter(tmp_path):
    facts = FACTS["25.12"]
    root = make_tree(tmp_path / "container", facts)
    medusa = root / "app/examples" / facts.converters["medusa"].value
    medusa.unlink()
    r = run("25.12", root)
    assert r.exit_code == 1
    out = json.loads(r.output)
    bad = [row for row in out["rows"] if not row["ok"]]
    assert [(row["mode"], row["backend"]) for row in bad] == [("medusa", "engine")]
    assert str(medusa) in bad[0]["error"]  # the preflight says where it looked
    assert [p["host"] for p in bad[0]["paths"] if not p["found"]] == [str(medusa)]
    assert bad[0]["steps"][0]["argv"][1] == "/app/examples/medusa/convert_checkpoint.py"


def test_text_output_prints_argv_and_paths(tmp_path):
    facts = FACTS["25.10"]
    root = make_tree(tmp_path / "container", facts)
    r = CliRunner().invoke(
        cli, ["selftest", "--dry-run", "--container", "25.10", "--container-root", str(root), "--mode", "medusa"]
    )
    assert r.exit_code == 0, r.output
    assert "step convert-target: python3 /app/examples/medusa/convert_checkpoint.py --model_dir" in r.output
    assert "launch: " in r.output and "/opt/tritonserver/bin/tritonserver" in r.output
    assert f"{root}/app/examples/medusa/convert_checkpoint.py (in the container: " in r.output


def test_container_root_needs_dry_run(tmp_path):
    r = CliRunner().invoke(cli, ["selftest", "--container-root", str(tmp_path)])
    assert r.exit_code != 0 and "--dry-run" in r.output


def test_deploy_dry_run_shows_the_converter_under_app_examples(tmp_path):
    """`sdtk deploy recipes/llama-3.3-70b-draft-target.yaml --backend engine --dry-run`
    shows the converter under /app/examples (tensorrtllm_backend dockerfile/Dockerfile.triton.trt_llm_backend
    @r25.12: `WORKDIR /app`, `COPY --from=tensorrt_llm_code /workspace/tensorrt_llm/examples examples`)."""
    repo = Path(__file__).resolve().parents[2]
    r = CliRunner().invoke(
        cli,
        ["deploy", str(repo / "recipes/llama-3.3-70b-draft-target.yaml"), "--backend", "engine", "--dry-run",
         "--workdir", str(tmp_path / "wd"), "--json"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    script = json.loads(r.stdout)["build_script"]
    assert 'TRTLLM_EXAMPLES_DIR="${TRTLLM_EXAMPLES_DIR:-/app/examples}"' in script
    assert script.count('python3 "${TRTLLM_EXAMPLES_DIR}/models/core/llama/convert_checkpoint.py"') == 2
    assert "/app/tensorrt_llm/examples" not in script
    # the preflight says where it looked, and that a dry run outside the container did not find it
    assert "converter:target: skipped (dry run: /app/examples/models/core/llama/convert_checkpoint.py" in script


def test_deploy_dry_run_shows_one_bls_instance_per_batch_slot(tmp_path):
    """The dry run shows `bls_instance_count` equal to the engine's max batch size
    (tensorrtllm_backend docs/model_config.md, tensorrt_llm_bls: "When using the BLS model instead of the
    ensemble, you should set the number of model instances to the maximum batch size supported by the
    TRT engine to allow concurrent request execution."), and the rendered BLS config has that count."""
    from toolkit.recipe import load_recipe

    repo = Path(__file__).resolve().parents[2]
    recipe_path = repo / "recipes/llama-3.3-70b-draft-target.yaml"
    args = ["deploy", str(recipe_path), "--backend", "engine", "--dry-run", "--workdir", str(tmp_path / "wd")]
    r = CliRunner().invoke(cli, [*args, "--json"])
    assert r.exit_code == 0, r.output
    batch = load_recipe(recipe_path).build.max_batch_size
    assert f"tensorrt_llm_bls: {batch} instance(s) (the engine's max_batch_size" in json.loads(r.stdout)["repository"][0]
    text = CliRunner().invoke(cli, args)
    assert f"#     tensorrt_llm_bls: {batch} instance(s)" in text.stdout
    r = CliRunner().invoke(cli, [*args, "--set", "serving.bls_instance_count=3", "--json"])
    assert "tensorrt_llm_bls: 3 instance(s) (serving.bls_instance_count" in json.loads(r.stdout)["repository"][0]


def test_dry_run_of_26_07_resolves_every_path_from_its_facts(tmp_path):
    """26.07 (tensorrtllm_backend r26.07, 3bc1153): TensorRT-LLM 1.2.1 (`ARG TENSORRTLLM_VER=1.2.1`), Python
    in the /opt/venv-tritonserver venv (`python3.12 -m venv /opt/venv-tritonserver`), the engine path
    still shipped and deprecated (NVIDIA/TensorRT-LLM PR #11723): its rows run, and the report says so."""
    facts = FACTS["26.07"]
    root = make_tree(tmp_path / "container", facts)
    r = run("26.07", root)
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["known"] and out["trtllm_version"] == "1.2.1"
    assert out["image"] == "nvcr.io/nvidia/tritonserver:26.07-trtllm-python-py3"
    assert {b for _, b in plan_modes("1.2.1")} == {"engine", "llmapi"}
    assert any("#11723" in n for n in out["notes"])
    for row in out["rows"]:
        python = next(p for p in row["paths"] if p["what"] == "python")
        assert python["path"] == "/opt/venv-tritonserver/bin/python3" and python["found"]
    assert set(out["unverified"]) == set(facts.unverified())  # the TensorRT-LLM tree's paths
    # MTP's cell (1.2.1 has MTP, not SA or PARD) plans on the self-test's DeepSeek-V3 target, whose
    # stand-in config.json passes the family check.
    rows = {(r["mode"], r["backend"]): r for r in out["rows"]}
    assert ("mtp", "llmapi") in rows and rows[("mtp", "llmapi")]["ok"], rows.get(("mtp", "llmapi"))
    assert not {("sa", "llmapi"), ("pard", "llmapi")} & set(rows)
    text = CliRunner().invoke(cli, ["selftest", "--dry-run", "--container", "26.07", "--container-root", str(root)])
    assert "path python: " + str(root / "opt/venv-tritonserver/bin/python3") in text.output
    assert "unverified for 26.07: inflight_batcher_llm_dir" in text.output


def test_dry_run_of_an_unknown_container_says_what_is_unverified_and_what_it_probes(tmp_path):
    """26.10 has no facts file (the r26.08 compatibility matrix has no trtllm-python-py3 row past 26.07):
    the dry run plans from 26.07's paths, says every fact is unverified, and names what it will probe.
    Before, it exited 2 ("no layout facts")."""
    r = CliRunner().invoke(cli, ["selftest", "--dry-run", "--container", "26.10"])
    assert r.exit_code in (0, 1), r.output  # 1: this machine is not the container, its paths are missing
    assert "UNVERIFIED for 26.10 (no facts file; every fact):" in r.output
    assert "trtllm_version: no upstream facts for container 26.10; assumed 1.2.1, as in 26.07" in r.output
    assert "inside the container sdtk probes /opt/venv-tritonserver/bin/python3, /usr/bin/python3" in r.output
    # under --container-root, it probes that tree now: a 26.07-shaped tree resolves every path
    root = make_tree(tmp_path / "container", FACTS["26.07"])
    r = run("26.10", root)
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["container"] == "26.10" and not out["known"] and out["probed"]
    assert out["image"] == "nvcr.io/nvidia/tritonserver:26.10-trtllm-python-py3"
    assert set(out["unverified"]) == set(FACTS["26.07"].facts())
    assert all(row["ok"] for row in out["rows"])


@pytest.mark.parametrize(
    ("version", "engine"), [("1.1.0", True), ("1.2.0rc2", True), ("1.2.1", True), ("1.3.0", False), ("1.3.0rc24", False)]
)
def test_selftest_plans_the_engine_path_through_1_2_only(version, engine):
    """The engine path ships through 1.2.x (deprecated, NVIDIA/TensorRT-LLM PR #11723) and is gone in
    the 1.3 line (PRs #15907, #15918); a 1.2 pre-release is a 1.2. The llmapi rows are there on all."""
    from toolkit.selftest.run import engine_notes

    backends = {b for _, b in plan_modes(version)}
    assert ("engine" in backends) is engine and "llmapi" in backends
    notes = " ".join(engine_notes(version))
    if version.startswith("1.2"):
        assert "#11723" in notes
    if version.startswith("1.3"):
        assert "#15907" in notes and "EAGLE-3, NGram and SA" in notes
