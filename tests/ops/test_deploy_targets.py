"""`deploy(target=local|k8s|slurm)` is one function (toolkit.deploy): the CLI's `--target` goes
through it, and k8s / slurm write exactly what their renderers write."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from toolkit.deploy import DeployOptions, deploy
from toolkit.errors import UsageError
from toolkit.ops.k8s import render_k8s
from toolkit.ops.slurm import render_slurm
from toolkit.recipe import load_recipe
from toolkit.repo.errors import RenderError

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "llama-3.3-70b-draft-target.yaml"


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_k8s_target_writes_what_render_k8s_writes(tmp_path):
    recipe = load_recipe(RECIPE)
    result = deploy(recipe, DeployOptions(target="k8s", out=tmp_path / "a", namespace="llm", replicas=2))
    render_k8s(recipe, namespace="llm", replicas=2, out_dir=tmp_path / "b", validate=True)
    assert _tree(tmp_path / "a") == _tree(tmp_path / "b")
    assert sorted(result.files) == sorted(p for p in (tmp_path / "a").rglob("*") if p.is_file())
    # the newest container's TensorRT-LLM serves draft-target through the LLM API
    assert (result.target, result.backend, result.model, result.entry_kind) == (
        "k8s",
        "llmapi",
        "tensorrt_llm",
        "llmapi",
    )
    assert result.model_repo == Path("/models/llama-3.3-70b-draft-target/triton_repo")
    assert result.to_dict()["files"] == [str(p) for p in result.files]


def test_slurm_target_writes_what_render_slurm_writes(tmp_path):
    recipe = load_recipe(RECIPE)
    result = deploy(
        recipe,
        DeployOptions(
            target="slurm",
            out=tmp_path / "a",
            workdir=tmp_path / "wd",
            image="nvcr.io/nvidia/tritonserver:25.12-trtllm-python-py3",
        ),
    )
    render_slurm(
        recipe,
        out_dir=tmp_path / "b",
        workdir=str(tmp_path / "wd"),
        container_image="nvcr.io/nvidia/tritonserver:25.12-trtllm-python-py3",
    )
    assert _tree(tmp_path / "a") == _tree(tmp_path / "b") and len(result.files) == 1
    assert result.model_repo == tmp_path / "wd" / recipe.display_name / "triton_repo"
    assert "srun" in result.files[0].read_text()  # the image runs the ranks through pyxis


def test_a_target_needs_an_out_dir_and_a_known_name(tmp_path):
    recipe = load_recipe(RECIPE)
    with pytest.raises(UsageError, match="--target slurm needs --out DIR"):
        deploy(recipe, DeployOptions(target="slurm"))
    with pytest.raises(UsageError, match="target must be one of local, k8s, slurm"):
        deploy(recipe, DeployOptions(target="nomad", out=tmp_path))


def test_cli_target_goes_through_toolkit_deploy(tmp_path, monkeypatch):
    from toolkit import deploy as deploy_mod
    from toolkit.cli import cli

    calls = []
    real = deploy_mod.deploy

    def spy(recipe, options, **kwargs):
        calls.append(options)
        return real(recipe, options, **kwargs)

    monkeypatch.setattr(deploy_mod, "deploy", spy)
    out = tmp_path / "out"
    res = CliRunner().invoke(
        cli,
        ["deploy", str(RECIPE), "--target", "slurm", "--out", str(out), "--workdir", str(tmp_path), "--json"],
    )
    assert res.exit_code == 0, res.output
    assert [c.target for c in calls] == ["slurm"] and calls[0].out == out
    assert json.loads(res.stdout) == [str(out / "llama-3.3-70b-draft-target.sbatch")]
    res = CliRunner().invoke(cli, ["deploy", str(RECIPE), "--target", "k8s"])
    assert res.exit_code != 0 and "--target k8s needs --out DIR" in res.output


@pytest.mark.parametrize("target", ["k8s", "slurm"])
def test_a_bad_entry_point_name_is_refused_before_a_file_is_written(tmp_path, target):
    """serving.model_name naming another model of the repository fails the render in the pod;
    deploy(target=k8s|slurm) refuses it up front and leaves --out as it was."""
    recipe = load_recipe(ROOT / "recipes" / "tiny-eagle3.yaml", ["serving.model_name=preprocessing"])
    out = tmp_path / "out"
    with pytest.raises(RenderError, match="serving.model_name 'preprocessing'"):
        deploy(recipe, DeployOptions(target=target, out=out, workdir=tmp_path / "wd"))
    assert not out.exists() or not any(out.rglob("*"))


@pytest.mark.parametrize("target", ["k8s", "slurm"])
def test_the_backend_option_reaches_k8s_and_slurm(tmp_path, target):
    """`sdtk deploy --target k8s|slurm --backend engine` renders the engine path, as `--set
    backend=engine` does; it used to be dropped silently (the files said backend llmapi)."""
    recipe = load_recipe(RECIPE)
    deploy(
        load_recipe(RECIPE, ["backend=engine"]),
        DeployOptions(target=target, out=tmp_path / "set", workdir=tmp_path),
    )
    result = deploy(
        recipe, DeployOptions(target=target, backend="engine", out=tmp_path / "opt", workdir=tmp_path)
    )
    assert (result.backend, result.model, result.entry_kind) == ("engine", "tensorrt_llm_bls", "bls")
    assert _tree(tmp_path / "opt") == _tree(tmp_path / "set")


@pytest.mark.parametrize("target", ["k8s", "slurm"])
def test_k8s_and_slurm_renders_say_the_engine_path_is_deprecated_on_1_2(tmp_path, target):
    """TensorRT-LLM 1.2.x still ships the engine path, deprecated (NVIDIA/TensorRT-LLM PR #11723): the
    render says so where the user looks, on stderr, and in the files (k8s NOTES.md, the sbatch header)."""
    said: list[str] = []
    recipe = load_recipe(RECIPE, ["backend=engine", "trtllm_version=1.2.1"])
    result = deploy(
        recipe, DeployOptions(target=target, out=tmp_path / "o", workdir=tmp_path), progress=said.append
    )
    assert any(m.startswith("WARNING:") and "PR #11723" in m for m in said), said
    text = "\n".join(p.read_text() for p in result.files if p.name in ("NOTES.md",) or p.suffix == ".sbatch")
    assert "deprecated since TensorRT-LLM 1.2 (NVIDIA/TensorRT-LLM PR #11723)" in text
    quiet: list[str] = []
    deploy(
        load_recipe(RECIPE),
        DeployOptions(target=target, out=tmp_path / "q", workdir=tmp_path),
        progress=quiet.append,
    )
    assert not any("WARNING" in m for m in quiet), quiet


@pytest.mark.parametrize(
    ("overrides", "model"),
    [([], "tensorrt_llm"), (["backend=engine"], "tensorrt_llm_bls"), (["serving.model_name=chat"], "chat")],
)
def test_the_k8s_notes_doctor_command_probes_the_entry_model(tmp_path, overrides, model):
    """`sdtk doctor --url` probes `--model` (default "ensemble"): the NOTES.md command names the
    model clients call, which an llmapi repository (tensorrt_llm) and a draft-target one (the BLS)
    have instead of an ensemble."""
    result = deploy(load_recipe(RECIPE, overrides), DeployOptions(target="k8s", out=tmp_path / "o"))
    assert result.model == model
    notes = (tmp_path / "o" / "NOTES.md").read_text()
    assert f"/metrics --model {model}\n" in notes
