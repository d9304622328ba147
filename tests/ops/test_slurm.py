"""Slurm sbatch scripts: syntax, #SBATCH geometry, the leader-mode argv, and the readiness loop
(run for real against stand-in srun / scontrol / curl commands)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from toolkit.errors import UsageError
from toolkit.ops.layout import rank_commands
from toolkit.ops.slurm import plan_slurm, render_slurm
from toolkit.recipe import load_recipe, parse_recipe

NGC = "nvcr.io/nvidia/tritonserver:25.12-trtllm-python-py3"


def sbatch_options(script: str) -> dict[str, str]:
    out = {}
    for m in re.finditer(r"^#SBATCH --([\w-]+)(?:=(.*))?$", script, re.M):
        out[m.group(1)] = m.group(2) or ""
    return out


def bash_n(path: Path) -> None:
    r = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def mpirun_in(script: str) -> list[str]:
    joined = script.replace("\\\n", " ")
    line = next(ln for ln in joined.splitlines() if ln.strip().startswith("mpirun "))
    return shlex.split(line.split(">", 1)[0])


def rank_script(script: str) -> str:
    return script.split("<<'RANKS'\n", 1)[1].split("\nRANKS\n", 1)[0]


def check_leader_mode(ranks: list[list[str]], n: int, http_port: int) -> None:
    assert len(ranks) == n
    assert f"--http-port={http_port}" in ranks[0]
    for r in ranks[1:]:
        assert not any(a.startswith(("--http-port", "--grpc-port", "--metrics-port")) for a in r)
        assert "--model-control-mode=explicit" in r and "--load-model=tensorrt_llm" in r
    shm = [next(a for a in r if "shm-region-prefix-name=" in a) for r in ranks]
    assert shm == [f"--backend-config=python,shm-region-prefix-name=sdtk{i}_" for i in range(n)]


def test_multi_node_mpirun_script(recipe_tp8_pp2, tmp_path):
    (path,) = render_slurm(recipe_tp8_pp2, out_dir=tmp_path, workdir="/lustre/me/sdtk", partition="gpu")
    bash_n(path)
    assert os.access(path, os.X_OK)
    script = path.read_text()
    opts = sbatch_options(script)
    assert opts["nodes"] == "2" and opts["ntasks-per-node"] == "8" and opts["gpus-per-node"] == "8"
    assert opts["partition"] == "gpu" and "exclusive" in opts
    assert opts["output"].startswith("/lustre/me/sdtk/")  # an existing directory
    argv = mpirun_in(script)
    assert argv[:2] == ["mpirun", "--allow-run-as-root"]
    check_leader_mode(rank_commands(argv), 16, 8000)
    assert all(
        "--model-repository=/lustre/me/sdtk/llama-70b-tp8pp2/triton_repo" in r for r in rank_commands(argv)
    )
    # readiness loop: deadline, early exit, log tail
    assert 'curl -sf "$URL/v2/health/ready"' in script
    assert 'kill -0 "$SERVER_PID"' in script and "tail -n 50" in script


def test_multi_node_srun_pyxis_script(recipe_tp8_pp2, tmp_path):
    plan = plan_slurm(recipe_tp8_pp2, workdir="/lustre/me/sdtk", container_image=NGC)
    assert plan.launcher == "srun"
    path = tmp_path / "job.sbatch"
    path.write_text(plan.script)
    bash_n(path)
    script = plan.script
    srun = next(ln for ln in script.replace("\\\n", " ").splitlines() if ln.startswith("srun "))
    assert "--mpi=pmix" in srun and f"--container-image={NGC}" in srun
    assert "--container-mounts=/lustre/me/sdtk:/lustre/me/sdtk" in srun
    # the per-task script is the same leader-mode layout, one case per SLURM_PROCID
    body = rank_script(script).replace("\\\n", " ")
    cases = dict(re.findall(r"^\s+(\d+)\) exec (.*?) ;;$", body, re.M))
    ranks = [shlex.split(cases[str(i)]) for i in range(len(cases))]
    check_leader_mode(ranks, 16, 8000)
    assert ranks == plan.rank_argvs and ranks[0][0] == "/opt/tritonserver/bin/tritonserver"
    rank_file = tmp_path / "rank.sh"
    rank_file.write_text(rank_script(script))
    bash_n(rank_file)


def test_single_gpu_is_one_task_without_mpirun(tmp_path):
    r = parse_recipe(
        {"name": "one", "backend": "engine", "trtllm_version": "1.1.0", "models": {"target": "a/b"}}
    )
    plan = plan_slurm(r, workdir="/shared/w")
    opts = sbatch_options(plan.script)
    assert (opts["nodes"], opts["ntasks-per-node"], opts["gpus-per-node"]) == ("1", "1", "1")
    assert plan.launcher == "direct" and plan.argv[0] == "tritonserver"
    assert "mpirun" not in plan.script.split("set -euo pipefail", 1)[1]


def test_engine_draft_target_runs_in_orchestrator_mode():
    plan = plan_slurm(
        load_recipe("llama-3.3-70b-draft-target", ["backend=engine", "trtllm_version=1.1.0"]), workdir="/w"
    )
    assert plan.topology.multi_model and plan.topology.ranks == 1
    assert "export TRTLLM_ORCHESTRATOR=1" in plan.script
    assert "--load-model=tensorrt_llm_draft" not in plan.script  # one process: no explicit ranks


def _srun_line(script: str) -> list[str]:
    joined = script.replace("\\\n", " ")
    line = next(ln for ln in joined.splitlines() if ln.startswith("srun "))
    return shlex.split(line.split(">", 1)[0])


def test_engine_draft_target_srun_runs_mpirun_in_one_task(tmp_path):
    """Orchestrator mode spawns its workers with MPI_Comm_spawn (tensorrtllm_backend v0.19.0
    docs/llama_multi_instance.md 314-322) and launch_triton_server.py always starts it under
    `mpirun -n 1` (v0.19.0 scripts/launch_triton_server.py 154-158); PMIx under Slurm has no
    MPI_Comm_spawn (pyxis FAQ). So the task is `srun --mpi=none`, one task, running mpirun itself."""
    recipe = load_recipe("llama-3.3-70b-draft-target", ["backend=engine"])
    plan = plan_slurm(recipe, workdir="/lustre/w", container_image=NGC)
    assert plan.launcher == "srun" and plan.topology.multi_model
    srun = _srun_line(plan.script)
    assert "--mpi=none" in srun and "--mpi=pmix" not in srun
    assert "--ntasks=1" in srun and "--nodes=1" in srun
    assert sbatch_options(plan.script)["ntasks-per-node"] == "1"
    body = rank_script(plan.script).replace("\\\n", " ")
    assert "SLURM_PROCID" not in body  # one task, no per-rank dispatch
    (cmd,) = [ln.strip() for ln in body.splitlines() if ln.strip().startswith("exec ")]
    argv = shlex.split(cmd)[1:]
    assert argv[:5] == ["mpirun", "--allow-run-as-root", "-n", "1", "/opt/tritonserver/bin/tritonserver"]
    assert argv == plan.argv and plan.rank_argvs == [plan.argv]
    assert "export TRTLLM_ORCHESTRATOR=1" in plan.script
    assert "export TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES=1" in plan.script


def test_llmapi_srun_runs_trtllm_llmapi_launch_in_every_task():
    """Upstream's Slurm launch of the LLM-API model (tensorrtllm_backend r25.12 docs/llmapi.md 99-105):
    `srun --ntasks-per-node=N --mpi=pmix --container-image=... trtllm-llmapi-launch
    /opt/tritonserver/bin/tritonserver --model-repository ...`; trtllm-llmapi-launch (TensorRT-LLM
    tensorrt_llm/llmapi/trtllm-llmapi-launch) serves on SLURM_PROCID 0 and makes the other tasks
    the LLM API's MPI workers, so there is one task per GPU of the model and one command for all."""
    recipe = load_recipe("llama-3.1-8b-eagle3", ["parallel.tp=2"])
    plan = plan_slurm(recipe, workdir="/lustre/w", container_image=NGC)
    assert plan.topology.backend == "llmapi" and plan.launcher == "srun"
    srun = _srun_line(plan.script)
    assert "--mpi=pmix" in srun and "--ntasks-per-node=2" in srun and "--nodes=1" in srun
    opts = sbatch_options(plan.script)
    assert (opts["nodes"], opts["ntasks-per-node"], opts["gpus-per-node"]) == ("1", "2", "2")
    body = rank_script(plan.script).replace("\\\n", " ")
    (cmd,) = [ln.strip() for ln in body.splitlines() if ln.strip().startswith("exec ")]
    argv = shlex.split(cmd)[1:]
    assert argv[:2] == ["trtllm-llmapi-launch", "/opt/tritonserver/bin/tritonserver"]
    assert argv[1:] == plan.argv and "mpirun" not in argv
    assert "--model-repository=/lustre/w/llama-3.1-8b-eagle3/triton_repo" in argv


def test_orchestrator_task_script_runs_mpirun(tmp_path):
    """The rendered job, run: srun (a stand-in that runs the task script as task 0) reaches mpirun
    with the orchestrator env set, not a bare tritonserver."""
    recipe = load_recipe("llama-3.3-70b-draft-target", ["backend=engine"])
    work = tmp_path / "work"
    (work / recipe.display_name / "triton_repo").mkdir(parents=True)
    (path,) = render_slurm(recipe, out_dir=tmp_path, workdir=str(work), container_image=NGC)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _fake_bin(bin_dir, "scontrol", 'echo "node001"')
    _fake_bin(bin_dir, "srun", 'echo "srun: $*"; SLURM_PROCID=0 exec "${@: -2:1}" "${@: -1}"')
    _fake_bin(bin_dir, "mpirun", 'echo "mpirun: $* orchestrator=$TRTLLM_ORCHESTRATOR"; exit 0')
    _fake_bin(bin_dir, "curl", "exit 7")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "7"}
    env.pop("SLURM_JOB_NODELIST", None)
    r = subprocess.run(["bash", str(path)], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1  # the stand-in mpirun exits at once: "exited ... before it was ready"
    log = (work / recipe.display_name / "slurm" / "triton-7.log").read_text()
    assert "srun: --mpi=none --nodes=1 --ntasks=1" in log
    assert "mpirun: --allow-run-as-root -n 1 /opt/tritonserver/bin/tritonserver" in log
    assert "orchestrator=1" in log


def test_bad_options(recipe_tp8_pp2):
    with pytest.raises(UsageError, match="absolute path"):
        plan_slurm(recipe_tp8_pp2, workdir="relative/dir")
    with pytest.raises(UsageError, match="pyxis"):
        plan_slurm(recipe_tp8_pp2, workdir="/w", container_image=NGC, launcher="mpirun")
    with pytest.raises(UsageError, match="Slurm time"):
        plan_slurm(recipe_tp8_pp2, workdir="/w", time_limit="four hours")


# --------------------------------------------------------------------------- the readiness loop, run


def _fake_bin(d: Path, name: str, body: str) -> None:
    p = d / name
    p.write_text("#!/bin/bash\n" + body + "\n")
    p.chmod(0o755)


@pytest.fixture
def job(tmp_path):
    """A rendered job for a one-GPU recipe, a workdir with a model repository, and a bin/ for fakes."""
    r = parse_recipe(
        {"name": "one", "backend": "engine", "trtllm_version": "1.1.0", "models": {"target": "a/b"}}
    )
    work = tmp_path / "work"
    (work / "one" / "triton_repo").mkdir(parents=True)
    (path,) = render_slurm(r, out_dir=tmp_path, workdir=str(work), container_image=NGC)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _fake_bin(bin_dir, "scontrol", 'echo "node001"')
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "42"}
    env.pop("SLURM_JOB_NODELIST", None)
    return path, work, bin_dir, env


def test_readiness_loop_reports_a_launch_that_dies(job):
    path, work, bin_dir, env = job
    _fake_bin(
        bin_dir, "srun", "echo \"E: failed to load 'ensemble' version 1: Expected integer, got: $\"; exit 3"
    )
    _fake_bin(bin_dir, "curl", "exit 7")
    r = subprocess.run(["bash", str(path)], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "exited with code 3 before it was ready" in r.stderr
    assert "Expected integer, got: $" in r.stderr  # the log tail


def test_readiness_loop_waits_then_serves(job):
    path, work, bin_dir, env = job
    _fake_bin(bin_dir, "srun", 'echo "ranks: $*"; sleep 1; exit 0')
    _fake_bin(bin_dir, "curl", "exit 0")
    r = subprocess.run(["bash", str(path)], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "ready: http://node001:8000" in r.stderr
    assert "sdtk doctor --url http://node001:8000" in r.stderr
    log = (work / "one" / "slurm" / "triton-42.log").read_text()
    assert "--mpi=pmix" in log and (work / "one" / "slurm" / "rank.sh").exists()


def test_missing_repository_fails_fast(job):
    path, work, bin_dir, env = job
    (work / "one" / "triton_repo").rmdir()
    r = subprocess.run(["bash", str(path)], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "no model repository at" in r.stderr and "--render-only" in r.stderr


def test_every_bundled_recipe_renders_a_valid_script(tmp_path):
    from toolkit.errors import CompatError
    from toolkit.recipe import bundled_recipes

    rendered = 0
    for path in bundled_recipes().values():
        recipe = load_recipe(path)
        try:
            (script,) = render_slurm(recipe, out_dir=tmp_path, workdir="/shared/sdtk")
        except CompatError:
            continue
        bash_n(script)
        assert sbatch_options(script.read_text())["job-name"] == f"sdtk-{recipe.display_name}"
        rendered += 1
    assert rendered >= 10, rendered


@pytest.mark.parametrize("recipe_file", sorted((Path(__file__).resolve().parents[2] / "recipes").glob("*.yaml")))
@pytest.mark.parametrize("backend", [None, "engine"])
def test_the_readiness_loop_waits_for_the_model_clients_call(tmp_path, recipe_file, backend):
    """The sbatch script polls /v2/models/$MODEL/ready: $MODEL must be the repository's entry model
    (toolkit.repo.render.entry_point), not serving.model_name's default "ensemble", which an llmapi
    repository (one model, tensorrt_llm) and a draft-target one (entry tensorrt_llm_bls) lack: the job
    would wait READY_TIMEOUT and then kill a healthy server."""
    from toolkit import compat
    from toolkit.errors import CompatError, RecipeError
    from toolkit.repo.render import entry_point

    try:
        recipe = load_recipe(recipe_file, [f"backend={backend}"] if backend else [])
        plan = plan_slurm(recipe, workdir=str(tmp_path))
    except (CompatError, RecipeError, UsageError) as e:
        pytest.skip(f"{recipe_file.name} has no {backend or 'default'} path to render: {e}")
    assert plan.topology.backend == compat.check_recipe(recipe, installed_version=recipe.trtllm_version).backend
    model = re.search(r"^MODEL=(.*)$", plan.script, re.M)
    assert model is not None
    assert shlex.split(model.group(1)) == [entry_point(recipe, plan.topology.backend)[0]]


def test_an_llmapi_job_waits_for_tensorrt_llm_and_an_engine_draft_target_one_for_the_bls(tmp_path):
    path = Path(__file__).resolve().parents[2] / "recipes" / "llama-3.3-70b-draft-target.yaml"
    plan = plan_slurm(load_recipe(path), workdir=str(tmp_path))
    assert plan.topology.backend == "llmapi" and "\nMODEL=tensorrt_llm\n" in plan.script
    engine = plan_slurm(load_recipe(path, ["backend=engine"]), workdir=str(tmp_path))
    assert engine.topology.backend == "engine" and "\nMODEL=tensorrt_llm_bls\n" in engine.script
