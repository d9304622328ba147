"""One launch, wherever it is written down: every bundled recipe, rendered for every
backend and target, launches the same tritonserver ranks with the same flags and environment in

- the local launch (`sdtk deploy`: the argv and env `TritonServer.start` hands to the runner),
- `sdtk deploy --dry-run` (the last line of its script),
- RUNBOOK.md (its raw launch command),
- Kubernetes (launch.sh in the ConfigMap, which the `triton` container runs),
- Slurm (the sbatch script's launch line).

Each artifact is parsed on its own (shlex over the text it writes), then reduced to its facts: the
ranks and, for each rank, every flag but those that name where it runs. Those site flags may
differ by design: the binary and repository paths, the bind address (pods and Slurm nodes bind
every interface), the Python-backend shm prefix, the exit timeout, the backend directory, and,
for a single tritonserver, `--disable-auto-complete-config` (upstream's launcher passes it; the
runbook copies it). PATH is the runbook's note on the CPU build's Python, not part of the launch.
Engines are the stand-ins of tests/repo/conftest.py; nothing is built or launched.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest

from toolkit.recipe import load_recipe
from toolkit.server.discover import Candidate

from .conftest import engines_for, llmapi_options

ROOT = Path(__file__).resolve().parents[2]
NGC = Candidate("ngc", Path("/opt/tritonserver/bin/tritonserver"), True)
SITE_FLAGS = (
    "--model-repository=",
    "--http-address=",
    "--grpc-address=",
    "--metrics-address=",
    "--exit-timeout-secs=",
    "--backend-directory=",
    "--log-verbose=",
    "--backend-config=python,shm-region-prefix-name=",
)
# Every bundled recipe as it is, plus the launches no bundled recipe reaches on its own.
CASES = [(p.stem, ()) for p in sorted((ROOT / "recipes").glob("*.yaml"))] + [
    ("qwen2.5-coder-7b-lookahead", ("parallel.tp=4",)),  # engine leader mode: 4 ranks
    ("qwen2.5-coder-7b-lookahead", ("parallel.tp=16",)),  # 16 ranks over 2 nodes (k8s, Slurm)
    ("llama-3.3-70b-draft-target", ("backend=engine", "trtllm_version=1.1.0")),  # orchestrator mode
]

Launch = tuple[str, tuple[tuple[str, ...], ...], tuple[tuple[str, str], ...]]


def facts(argv: list[str], env: dict[str, str]) -> Launch:
    """(launcher, each rank's flags but the site's, the env but PATH) of one argv."""
    assert argv, "no launch command found"
    if argv[0] == "mpirun":
        words = argv[argv.index("-n") :]  # mpirun's own arguments (hosts, rsh agent) are the site's
        ranks, cur = [], []
        for w in [*words, ":"]:
            if w == ":":
                assert cur[:2] == ["-n", "1"] and cur[2].endswith("tritonserver"), cur
                ranks.append(cur[3:])
                cur = []
            else:
                cur.append(w)
    else:
        assert argv[0].endswith("tritonserver"), argv
        ranks = [[a for a in argv[1:] if a != "--disable-auto-complete-config"]]
    kept = tuple(tuple(a for a in rank if not a.startswith(SITE_FLAGS)) for rank in ranks)
    return argv[0] if argv[0] == "mpirun" else "tritonserver", kept, tuple(sorted(env.items()))


def _shell(text: str) -> tuple[list[str], dict[str, str]]:
    """A shell command line (continuations allowed): its leading VAR=value words, then its argv."""
    words = shlex.split(text.replace("\\\n", " "))
    env: dict[str, str] = {}
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
        key, _, value = words.pop(0).partition("=")
        if key != "PATH":
            env[key] = value
    return words, env


def _exports(script: str) -> dict[str, str]:
    out = {}
    for line in script.splitlines():
        if line.startswith("export "):
            key, _, value = shlex.split(line)[1].partition("=")
            out[key] = value
    return out


def local_launch(recipe, rendered, workdir: Path, monkeypatch) -> Launch:
    """The argv and the environment `sdtk deploy` would start tritonserver with."""
    from toolkit import runner
    from toolkit.deploy.local import server_for as _server
    from toolkit.server import launch

    class Spawned(Exception):
        pass

    seen: dict = {}

    def spawn(argv, *, env, **_kw):
        seen.update(argv=list(argv), env=dict(env))
        raise Spawned

    monkeypatch.setattr(runner, "spawn", spawn)
    monkeypatch.setattr(launch, "check_free", lambda host, ports: None)  # the recipe's ports, as written
    with pytest.raises(Spawned):
        _server(recipe, rendered, workdir, tritonserver=NGC).start(wait=False, record=False)
    added = {k: v for k, v in seen["env"].items() if os.environ.get(k) != v}
    return facts(seen["argv"], added)


def runbook_launch(text: str) -> Launch:
    block = text.split("The raw command:\n\n```bash\n", 1)[1].split("\n```", 1)[0]
    return facts(*_shell(block))


def dry_run_launch(script: str) -> Launch:
    return facts(*_shell(script.rstrip("\n").rsplit("\n", 1)[1]))


def k8s_launch(out: Path, recipe) -> tuple[str, Launch]:
    from toolkit.ops.k8s import k8s_name, load_manifests

    docs = load_manifests(out / f"{k8s_name(recipe.display_name)}.yaml")
    script = next(d for d in docs if d["kind"] == "ConfigMap")["data"]["launch.sh"]
    pods = [d["spec"].get("template") or d["spec"].get("leaderWorkerTemplate") for d in docs if "spec" in d]
    commands = [c["command"] for c in _containers(pods) if c["name"] == "triton"]
    assert commands and all(c == ["/bin/bash", "/sdtk/launch.sh"] for c in commands)
    backend = re.search(r"backend (\w+)", script)
    assert backend is not None
    argv, env = _shell(script.split("\nexec ", 1)[1])
    assert not env
    return backend.group(1), facts(argv, _exports(script))


def _containers(node) -> list[dict]:
    if isinstance(node, dict):
        found = list(node.get("containers") or [])
        return found + [c for v in node.values() for c in _containers(v)]
    if isinstance(node, list):
        return [c for v in node for c in _containers(v)]
    return []


def slurm_launch(script: str) -> tuple[str, Launch]:
    backend = re.search(r"^# Layout: .* backend (\w+)$", script, re.M)
    assert backend is not None
    before = script.split(' > "$LOG" 2>&1 &', 1)[0]
    line = before.rsplit('\nlog "starting', 1)[1].split("\n", 1)[1]
    argv, env = _shell(line)
    assert not env
    return backend.group(1), facts(argv, _exports(script))


def _backends(mode: str) -> list[str]:
    """The backends the support matrix allows for `mode` (toolkit.compat's cells)."""
    from toolkit.compat import matrix

    return [c.backend for c in matrix(mode) if c.supported]


@pytest.mark.parametrize(("name", "overrides"), CASES, ids=[f"{n}{''.join(o)}" for n, o in CASES])
def test_every_launch_of_a_recipe_is_the_same(name, overrides, tmp_path, monkeypatch):
    from toolkit.build.preflight import PreflightFailed
    from toolkit.deploy import plan_deploy
    from toolkit.ops.k8s import render_k8s
    from toolkit.ops.slurm import render_slurm
    from toolkit.repo import render_repository

    monkeypatch.delenv("NVIDIA_TRITON_SERVER_VERSION", raising=False)
    recipe = load_recipe(ROOT / "recipes" / f"{name}.yaml", list(overrides))
    seen: dict[str, dict[str, Launch]] = {}
    for backend in _backends(recipe.mode):
        work = tmp_path / backend
        try:
            plan = plan_deploy(recipe, backend=backend, workdir=work / "wd")
        except PreflightFailed as e:
            # TensorRT-LLM has MTP layers for some model families only: the tiny MTP target is a
            # Llama with sdtk's own MTP module, which the reference serves and TensorRT-LLM would not.
            assert recipe.mode == "mtp" and backend == "llmapi" and "mtp-family" in str(e), str(e)
            continue
        engines = engines_for(work, recipe, backend, tp=recipe.parallel.world_size)
        layout = recipe.repository_layout(backend)
        r = render_repository(
            recipe,
            engines,
            work / "repo",
            backend=backend,
            llmapi_options=llmapi_options(recipe) if layout == "llmapi" else None,
            tokenizer_dir="/models/tokenizer",
        )
        seen[backend] = {
            "local": local_launch(recipe, r, work / "server", monkeypatch),
            "RUNBOOK.md": runbook_launch(r.runbook.read_text()),
            "deploy --dry-run": dry_run_launch(plan.script()),
        }
    render_k8s(recipe, out_dir=tmp_path / "k8s")
    k8s_backend, k8s = k8s_launch(tmp_path / "k8s", recipe)
    seen.setdefault(k8s_backend, {})["k8s"] = k8s
    slurm = render_slurm(recipe, out_dir=tmp_path / "slurm", workdir=str(tmp_path / "wd"))
    slurm_backend, slurm_facts = slurm_launch(slurm[0].read_text())
    seen.setdefault(slurm_backend, {})["slurm"] = slurm_facts

    assert "k8s" in seen[k8s_backend] and "local" in seen[k8s_backend]  # k8s's backend is one local serves
    assert "local" in seen[slurm_backend]
    for backend, where in seen.items():
        local = where["local"]
        for place, launch in where.items():
            assert launch == local, (
                f"{name} {overrides} on {backend}: {place} launches\n{launch}\nlocal:\n{local}"
            )


def test_the_facts_see_a_difference():
    """The comparison is not blind: a flag, a rank or an env variable more is a difference."""
    argv = [
        "mpirun",
        "--allow-run-as-root",
        "-n",
        "1",
        "tritonserver",
        "--model-repository=/r",
        "--http-port=1",
    ]
    base = facts(argv, {})
    assert (
        facts([*argv[:4], "/bin/tritonserver", "--model-repository=/other", "--http-port=1"], {}) == base
    )  # a site flag
    assert facts([*argv, "--cuda-memory-pool-byte-size=0:0"], {}) != base
    assert facts([*argv, ":", "-n", "1", "tritonserver", "--load-model=tensorrt_llm"], {}) != base
    assert facts(argv, {"TRTLLM_ORCHESTRATOR": "1"}) != base
    assert facts(["tritonserver", "--http-port=1"], {}) != base  # no mpirun
