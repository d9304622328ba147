"""Slurm and Kubernetes scripts cannot be injected.

A hostile string names the workdir (Slurm), the models mount (Kubernetes; the constant is
pointed at a sandbox for the test), the tritonserver executable, the container image and the
download URL. Each script then runs under bash with recording stand-ins for the cluster tools
(`scontrol`, `srun`, `curl`, `tar`, `sdtk`, `tritonserver`; none can run here). It must create
nothing outside its workdir or mount, and the tools must receive each hostile value as one
argument. Values with control characters cannot be written safely onto `#SBATCH` or Dockerfile
lines, so they are refused with a UsageError instead.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _hostile import CONTROL_FREE, CORPUS, calls, created_outside, make_stubs, run_script, tree  # noqa: E402

from toolkit.containers import ngc_tritonserver  # noqa: E402
from toolkit.errors import UsageError  # noqa: E402
from toolkit.ops import k8s  # noqa: E402
from toolkit.ops.slurm import plan_slurm  # noqa: E402
from toolkit.recipe import parse_recipe  # noqa: E402

CONTROL = sorted(set(CORPUS) - set(CONTROL_FREE))


def _recipe():
    return parse_recipe(
        {"name": "hostile", "backend": "engine", "trtllm_version": "1.1.0", "models": {"target": "org/model"}}
    )


def _no_pwned(*roots: Path) -> list[str]:
    return [p for r in roots for p in tree(r) if Path(p).name.startswith("PWNED")]


@pytest.mark.parametrize("launcher", ["direct", "srun"])
@pytest.mark.parametrize("label", sorted(CONTROL_FREE))
def test_slurm_script_is_injection_safe(label, launcher, tmp_path):
    hostile = CORPUS[label]
    hdir = tmp_path / "sb" / hostile
    wd = hdir / "wd"
    repo = wd / "hostile" / "triton_repo"
    repo.mkdir(parents=True)
    server = make_stubs(hdir / "bin", tmp_path / "calls", ["tritonserver"]) / "tritonserver"
    image = f"registry.example/{hostile}:1" if launcher == "srun" else None
    plan = plan_slurm(_recipe(), workdir=str(wd), tritonserver=str(server), container_image=image)
    script = tmp_path / "job.sbatch"
    script.write_text(plan.script, encoding="utf-8")
    stubs = make_stubs(tmp_path / "stubs", tmp_path / "calls", ["scontrol", "srun", "curl", "hostname"])
    cwd = tmp_path / "sb" / "cwd"
    cwd.mkdir()

    before = tree(tmp_path / "sb")
    res = run_script(script, cwd=cwd, stub_bin=stubs)
    after = tree(tmp_path / "sb")
    assert res.returncode == 0, res.stderr[-2000:]
    if launcher == "srun":  # srun would run the rank script on each node: run rank 0 here
        rank = wd / "hostile" / "slurm" / "rank.sh"
        res = run_script(rank, cwd=cwd, stub_bin=stubs, env={"SLURM_PROCID": "0"})
        assert res.returncode == 0, res.stderr[-2000:]
        after = tree(tmp_path / "sb")
    assert created_outside(before, after, [wd]) == []
    assert _no_pwned(tmp_path) == []

    ran = calls(tmp_path / "calls")
    servers = [c for c in ran if c["cmd"] == "tritonserver"]
    assert len(servers) == 1 and servers[0]["exe"] == str(server)
    assert servers[0]["argv"] == plan.rank_argvs[0][1:]
    assert f"--model-repository={repo}" in servers[0]["argv"]
    if launcher == "srun":
        (srun,) = [c for c in ran if c["cmd"] == "srun"]
        assert f"--container-image={image}" in srun["argv"]
        assert f"--container-mounts={wd}:{wd}" in srun["argv"]


@pytest.mark.parametrize("label", CONTROL)
def test_slurm_refuses_control_characters(label, tmp_path):
    hostile = CORPUS[label]
    with pytest.raises(UsageError, match="control character"):
        plan_slurm(_recipe(), workdir=f"/shared/{hostile}")
    with pytest.raises(UsageError, match="control character"):
        plan_slurm(_recipe(), workdir="/shared", job_name=hostile)


@pytest.mark.parametrize("label", sorted(CONTROL_FREE))
def test_k8s_scripts_are_injection_safe(label, tmp_path, monkeypatch):
    hostile = CORPUS[label]
    mount = tmp_path / "sb" / hostile / "models"
    repo = mount / "hostile" / "triton_repo"
    monkeypatch.setattr(k8s.objects, "MODELS_MOUNT", str(mount))  # where the objects read it
    stubs = make_stubs(
        tmp_path / "stubs", tmp_path / "calls", ["sdtk", "curl", "tar", "hostname", "tritonserver"]
    )
    cwd = tmp_path / "sb" / "cwd"
    cwd.mkdir(parents=True)

    url = f"https://example.com/{hostile}.tar"
    for prepare, extra in (("build", {}), ("pull", {"pull_from": url})):
        plan = k8s.plan_k8s(_recipe(), image="registry.example/sdtk:1", prepare=prepare, **extra)
        (files,) = [m["data"] for m in plan.manifests if m["kind"] == "ConfigMap"]
        if repo.exists():
            repo.rmdir()
            (mount / "hostile" / ".sdtk-ready").unlink()
        repo.mkdir(parents=True)  # what `sdtk deploy --render-only` (or the archive) provides
        for name, text in files.items():
            if name.endswith(".sh"):
                # The NGC image's absolute tritonserver path cannot exist here: point it at the stub.
                (tmp_path / name).write_text(text.replace(ngc_tritonserver(), str(stubs / "tritonserver")))
        before = tree(tmp_path / "sb")
        for name in ("prepare.sh", "launch.sh"):
            res = run_script(tmp_path / name, cwd=cwd, stub_bin=stubs, env={"SDTK_ROLE": "leader"})
            assert res.returncode == 0, (name, res.stderr[-2000:])
        assert created_outside(before, tree(tmp_path / "sb"), [mount]) == []
        assert _no_pwned(tmp_path) == []

    ran = calls(tmp_path / "calls")
    sdtk = [c["argv"] for c in ran if c["cmd"] == "sdtk"]
    assert sdtk == [
        ["build", f"{k8s.SCRIPTS_MOUNT}/recipe.yaml", "--workdir", str(mount)],
        ["deploy", f"{k8s.SCRIPTS_MOUNT}/recipe.yaml", "--workdir", str(mount), "--render-only"],
    ]
    (curl,) = [c["argv"] for c in ran if c["cmd"] == "curl"]
    assert curl[-1] == url and curl[curl.index("-o") + 1] == f"{mount}/.hostile.download"
    servers = [c["argv"] for c in ran if c["cmd"] == "tritonserver"]
    assert len(servers) == 2 and all(f"--model-repository={repo}" in s for s in servers)


@pytest.mark.parametrize("label", sorted(CORPUS))
def test_k8s_image_and_url_stay_on_their_lines(label):
    hostile = CORPUS[label]
    image = f"registry.example/{hostile}:1"
    if label in CONTROL or any(c.isspace() for c in hostile):
        with pytest.raises(UsageError):
            k8s.plan_k8s(_recipe(), image=image)
    else:
        plain = k8s.plan_k8s(_recipe(), image="registry.example/x:1").extras["Dockerfile"]
        docker = k8s.plan_k8s(_recipe(), image=image).extras["Dockerfile"]
        assert len(docker.splitlines()) == len(plain.splitlines())
        assert [ln for ln in docker.splitlines() if ln.startswith("FROM ")] == [f"FROM {image}"]
    if label in CONTROL:
        with pytest.raises(UsageError, match="control character"):
            k8s.plan_k8s(_recipe(), prepare="pull", pull_from=f"https://example.com/{hostile}")
