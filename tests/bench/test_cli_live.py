"""The CLI end to end on live tiny deployments (real Triton, reference backend), through click's
CliRunner: deploy, infer, bench, bench --compare, tune and plan. One tiny-draft-target
deployment is shared by the module; --compare deploys its own two. Run from a scratch
directory so that anything written into the current directory shows up.

These exist so that a broken import or a swallowed error in a command's path cannot hide:
every command runs its real code against a real server.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from triton_support import STOP_GRACE_S

from toolkit.cli import cli
from toolkit.recipe import load_recipe

from .conftest import tritonserver_missing

ROOT = Path(__file__).resolve().parents[2]
TINY = Path(os.environ.get("SDTK_TINY_MODELS") or ROOT / "models" / "tiny")
RECIPES = ROOT / "recipes"

pytestmark = [pytest.mark.tritonserver, pytest.mark.slow]


def sdtk(*args: str):
    r = CliRunner().invoke(cli, list(args))
    assert r.exit_code == 0, f"sdtk {' '.join(args)} exited {r.exit_code}:\n{r.output}"
    return r


def data(r) -> dict:
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def cwd(tmp_path_factory):
    """A scratch current directory; the tests check that nothing lands in it."""
    d = tmp_path_factory.mktemp("cwd")
    old = Path.cwd()
    os.chdir(d)
    yield d
    os.chdir(old)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, cwd):
    missing = tritonserver_missing()
    if missing:
        pytest.skip(missing)
    assert (TINY / "draft" / "config.json").is_file(), f"{TINY} is committed; the tiny draft is missing"
    wd = tmp_path_factory.mktemp("deployments")
    r = sdtk(
        "deploy",
        str(RECIPES / "tiny-draft-target.yaml"),
        "--detach",
        "--auto-ports",
        "--workdir",
        str(wd),
        "--json",
    )
    info = data(r)
    try:
        yield wd, info
    finally:
        # The short grace of tests/triton_support.py: a graceful stop here took ~10 s and is not what
        # this module checks (tests/integration/test_deploy.py and test_server_lifecycle.py do).
        CliRunner().invoke(cli, ["stop", "--workdir", str(wd), "--grace", str(STOP_GRACE_S)])


def test_deploy_detached_records_state(workdir):
    wd, info = workdir
    dep = wd / "tiny-draft-target"
    assert info["model"] == "tensorrt_llm_bls" and info["pid"] and info["validation"]["ok"]
    assert (dep / "state.json").is_file() and (dep / "recipe.json").is_file()
    # status accepts the deploy workdir and the deployment directory alike (one resolver).
    for w in (wd, dep):
        assert data(sdtk("status", "--workdir", str(w), "--json"))["state"] == "running"


def test_infer_counts_tokens(workdir, cwd):
    wd, _ = workdir
    from transformers import AutoTokenizer

    for protocol in ("http", "grpc"):
        out = data(
            sdtk(
                "infer",
                "def add(a, b):",
                "--workdir",
                str(wd),
                "--protocol",
                protocol,
                "--max-tokens",
                "16",
                "--json",
            )
        )
        tok = AutoTokenizer.from_pretrained(TINY / "target")
        assert out["text"] and out["output_tokens"] == len(
            tok(out["text"], add_special_tokens=False)["input_ids"]
        )
    assert list(cwd.iterdir()) == []


def test_bench_on_the_deploy_workdir(workdir, cwd):
    wd, _ = workdir
    for protocol in ("grpc", "http"):
        r = data(
            sdtk(
                "bench", "--workdir", str(wd), "--protocol", protocol, "--concurrency", "1",
                "--requests", "4", "--warmup", "1", "--max-tokens", "24", "--json",
            )
        )  # fmt: skip
        s = r["levels"][0]["summary"]
        assert r["token_counts_exact"] and s["token_count_source"] == "server" and s["ok"] == 4
        # γ from the deployed recipe (deployed_recipe works)
        assert r["settings"]["draft_len"] == load_recipe("tiny-draft-target").speculative.max_draft_len
        assert s["acceptance"]["length"] and s["acceptance"]["length"] > 1
        # Draft-target's BLS is not decoupled (as on the GPU path): whole responses, one chunk each,
        # so no chunk intervals and no TPOT; TTFT is the latency, and the report says why.
        assert s["chunk_interval_s"]["n"] == 0 and s["tpot_s"]["n"] == 0 and s["ttft_s"]["n"] == 4
        assert s["ttft_s"]["p50"] == pytest.approx(s["e2e_s"]["p50"])
        assert any("is not decoupled" in w for w in r["warnings"])
        assert Path(r["report_dir"]).parent == wd / "reports"
    assert list(cwd.iterdir()) == []


def test_tune_without_recipe(workdir, cwd):
    wd, _ = workdir
    r = data(
        sdtk(
            "tune", str(wd / "tiny-draft-target"), "--draft-lens", "2", "--concurrency", "1",
            "--requests", "4", "--json",
        )
    )  # fmt: skip
    assert r["method"] == "per-request" and r["settings"]["recipe"] == "tiny-draft-target"
    assert set(r["schedule"]) == {"1"} and Path(r["overlay_path"]).is_file()
    # The baseline before and after the one configuration, each run with exact token counts.
    assert len(r["baseline_runs"]) == 2 and r["configs"][0]["baselines"] == [0, 1]
    assert all(b["token_counts_exact"] for b in r["baseline_runs"]) and r["runs"]["γ=2"]["token_counts_exact"]
    assert Path(r["report_dir"]).parent == wd / "tiny-draft-target" / "reports"
    assert list(cwd.iterdir()) == []


def test_plan_probe(cwd):
    assert (TINY / "draft" / "config.json").is_file(), f"{TINY} is committed; the tiny draft is missing"
    r = data(sdtk("plan", str(RECIPES / "tiny-draft-target.yaml"), "--probe-prompts", "4", "--json"))
    assert r["probe"]["prompts"] == 4 and r["recommendation"]["settings"]["max_draft_len"] >= 1
    assert list(cwd.iterdir()) == []


@pytest.mark.alone  # tiny-draft-target's 16 BLS stubs beside other servers' start-ups: Triton 2.51's Python backend aborted (boost lock_exception) in a parallel run
def test_bench_compare_deploys_under_workdir(workdir, cwd, tmp_path):
    wd = tmp_path / "ab"
    r = data(
        sdtk(
            "bench", "--compare", str(RECIPES / "tiny-baseline.yaml"), str(RECIPES / "tiny-draft-target.yaml"),
            "--workdir", str(wd), "--concurrency", "1", "--requests", "4", "--warmup", "1",
            "--max-tokens", "24", "--json",
        )
    )  # fmt: skip
    assert r["token_counts_exact"] and r["levels"][0]["speedup"]["point"] > 0
    assert Path(r["report_dir"]).parent == wd / "reports"
    assert {"compare.json", "compare.csv"} <= {Path(p).name for p in r["report_files"]}
    # Both recipes were deployed under --workdir (and stopped again).
    for name in ("tiny-baseline", "tiny-draft-target"):
        assert (wd / name / "triton_repo").is_dir() and not (wd / name / "state.json").exists()
    assert list(cwd.iterdir()) == []
