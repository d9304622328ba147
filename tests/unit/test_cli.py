"""The CLI through click's CliRunner: commands, --json output, error mapping."""

from __future__ import annotations

import json

from click.testing import CliRunner

from toolkit import __version__
from toolkit.cli import cli


def invoke(*args, **kw):
    return CliRunner().invoke(cli, list(args), **kw)


def test_help_lists_commands():
    r = invoke("--help")
    assert r.exit_code == 0
    for name in ("recipes", "compat", "doctor"):
        assert name in r.stdout


def test_version():
    r = invoke("--version")
    assert r.exit_code == 0 and __version__ in r.stdout


def test_recipes_list_json():
    r = invoke("recipes", "list", "--json")
    assert r.exit_code == 0
    names = {i["name"] for i in json.loads(r.stdout)}
    assert "llama-3.1-8b-eagle3" in names
    assert all("error" not in i for i in json.loads(r.stdout))


def test_recipes_show_and_overrides():
    r = invoke("recipes", "show", "vicuna-7b-medusa")
    assert r.exit_code == 0 and "medusa-vicuna-7b-v1.3" in r.stdout
    r = invoke("recipes", "show", "vicuna-7b-medusa", "--json", "--set", "build.max_batch_size=2")
    data = json.loads(r.stdout)
    assert data["build"]["max_batch_size"] == 2
    assert data["speculative"]["mode"] == "medusa"


def test_validate_all_shipped():
    from toolkit.recipe import bundled_recipes

    r = invoke("recipes", "validate", *[str(p) for p in bundled_recipes().values()])
    assert r.exit_code == 0, r.output
    assert r.stdout.count("ok ") == len(bundled_recipes())


def test_validate_reports_compat_failure(tmp_path):
    p = tmp_path / "e3.yaml"
    p.write_text("models:\n  target: a/b\n  eagle_head: c/d\nbackend: engine\nspeculative:\n  mode: eagle3\n")
    r = invoke("recipes", "validate", str(p))
    assert r.exit_code == 1
    assert "PyTorch backend" in r.stdout and "llmapi" in r.stderr


def test_compat_json_filters():
    r = invoke("compat", "--mode", "eagle3", "--json")
    cells = json.loads(r.stdout)
    assert {c["backend"] for c in cells} == {"engine", "llmapi", "reference"}
    assert [c["supported"] for c in cells if c["backend"] == "engine"] == [False]
    r = invoke("compat", "--backend", "engine")
    assert r.exit_code == 0 and "lookahead" in r.stdout


def test_compat_rejects_unknown_mode():
    r = invoke("compat", "--mode", "eagle4")
    assert r.exit_code == 2


def test_doctor_json():
    r = invoke("doctor", "--json")
    assert r.exit_code == 0
    checks = {c["name"]: c for c in json.loads(r.stdout)["checks"]}
    assert checks["python"]["ok"]
    assert checks["tensorrt_llm"]["value"] == "not installed"
    assert "embedded" in checks["tritonserver"]["detail"]


def test_doctor_flag_tritonserver_missing(tmp_path):
    r = invoke("doctor", "--json", "--tritonserver", str(tmp_path / "nope"))
    checks = {c["name"]: c for c in json.loads(r.stdout)["checks"]}
    assert "flag=no" in checks["tritonserver"]["detail"]


def test_error_has_no_traceback_unless_debug(tmp_path, monkeypatch):
    missing = tmp_path / "missing.yaml"
    r = invoke("recipes", "show", str(missing))
    assert r.exit_code == 1
    assert r.stderr.startswith("error: ") and "Traceback" not in r.output
    monkeypatch.setenv("SDTK_DEBUG", "1")
    r = invoke("recipes", "show", str(missing))
    assert "Traceback" in r.stderr


def test_build_dry_run_prints_runbook():
    r = invoke("build", "vicuna-7b-medusa", "--dry-run")
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("#!/usr/bin/env bash")
    assert "--speculative_decoding_mode medusa" in r.stdout


def test_build_gpu_backend_without_trtllm_fails_fast():
    r = invoke("build", "llama-3.1-8b-eagle3")
    assert r.exit_code == 1
    assert r.stderr.startswith("error: ") and "hint:" in r.stderr and "--dry-run" in r.stderr


def test_plan_passes_the_serving_overhead(monkeypatch):
    """`sdtk plan --serving-overhead-ms` reaches bench.api.plan in seconds; absent, None."""
    import toolkit.bench.api as api
    from toolkit.bench.decide.predict import PlanResult

    seen = []

    def fake_plan(recipe, opts, **kw):
        seen.append(kw["serving_overhead"])
        return PlanResult(recipe.display_name, recipe.mode, "reference", "measured", [1])

    monkeypatch.setattr(api, "plan", fake_plan)
    assert invoke("plan", "tiny-ngram", "--serving-overhead-ms", "2.5", "--json").exit_code == 0
    assert invoke("plan", "tiny-ngram", "--json").exit_code == 0
    assert seen == [0.0025, None]
    assert invoke("plan", "tiny-ngram", "--serving-overhead-ms", "-1").exit_code == 2


def test_plan_passes_the_bench_runs_request_count(monkeypatch):
    """`sdtk plan --requests N` (the requests per level of the bench run it predicts) reaches
    bench.api.plan as RunOptions.requests; absent, `sdtk bench`'s default; below 1, a usage error."""
    import toolkit.bench.api as api
    from toolkit.bench.decide.predict import PlanResult
    from toolkit.bench.options import RunOptions

    seen = []

    def fake_plan(recipe, opts, **kw):
        seen.append(opts.requests)
        return PlanResult(recipe.display_name, recipe.mode, "reference", "measured", [1])

    monkeypatch.setattr(api, "plan", fake_plan)
    assert invoke("plan", "tiny-ngram", "--requests", "24", "--json").exit_code == 0
    assert invoke("plan", "tiny-ngram", "--json").exit_code == 0
    assert seen == [24, RunOptions().requests]
    assert invoke("plan", "tiny-ngram", "--requests", "0").exit_code == 2


def test_bench_interleave_reaches_compare_and_needs_it(monkeypatch):
    """`sdtk bench --compare A B --interleave` asks bench.api.compare for the interleaved order
    (without the flag, the default order); `--rounds K` passes K and implies the interleaved
    order. --interleave or --rounds without --compare, and --rounds 0, are usage errors that
    deploy nothing."""
    import toolkit.bench.api as api
    from toolkit.bench.results import ABResult

    seen = []

    def fake_compare(a, b, opts, **kw):
        seen.append((kw["interleave"], kw["rounds"]))
        return ABResult(str(a), str(b), {}, {})

    monkeypatch.setattr(api, "compare", fake_compare)
    assert (
        invoke("bench", "--compare", "tiny-baseline", "tiny-ngram", "--interleave", "--json").exit_code == 0
    )
    assert invoke("bench", "--compare", "tiny-baseline", "tiny-ngram", "--json").exit_code == 0
    assert (
        invoke("bench", "--compare", "tiny-baseline", "tiny-ngram", "--rounds", "3", "--json").exit_code == 0
    )
    assert seen == [(True, 1), (False, 1), (True, 3)]
    for flags in (["--interleave"], ["--rounds", "2"]):
        r = invoke("bench", "tiny-ngram", *flags)
        assert r.exit_code == 2 and r.stderr.startswith("error: ") and "--compare" in r.stderr
        assert flags[0] in r.stderr
    assert invoke("bench", "--compare", "tiny-baseline", "tiny-ngram", "--rounds", "0").exit_code == 2
    assert len(seen) == 3


# Every command, from whichever module of toolkit/cli/ registers it.
COMMANDS = {
    "bench", "build", "compat", "deploy", "doctor", "generate", "infer", "logs", "monitor", "plan",
    "recipes", "restart", "selftest", "status", "stop", "train-draft", "tune", "validate",
}  # fmt: skip


def test_every_command_is_registered():
    assert set(cli.commands) == COMMANDS
    assert set(cli.commands["recipes"].commands) == {"list", "show", "validate", "schema"}


def test_importing_the_cli_pulls_no_heavy_dependency():
    """`sdtk --help` stays fast: the command modules import their libraries when they run."""
    import subprocess
    import sys

    heavy = ("torch", "transformers", "tritonclient", "numpy", "pydantic", "yaml", "jinja2", "httpx", "rich")
    code = (
        f"import sys, toolkit.cli\nprint(sorted({{m.split('.')[0] for m in sys.modules}} & set({heavy!r})))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_python_dash_m_runs_the_cli():
    """`python -m toolkit.cli` (and torchrun's `-m toolkit.cli`) reaches the same command group."""
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-m", "toolkit.cli", "--version"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    assert __version__ in r.stdout
