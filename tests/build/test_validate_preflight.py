"""`recipes validate` refuses what `build` refuses, and a dry run refuses missing paths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from toolkit.build import build
from toolkit.build.preflight import PreflightFailed
from toolkit.cli import cli
from toolkit.recipe_check import check_recipe_file

REPO = Path(__file__).resolve().parents[2]


def quiet(_: str) -> None:
    pass


def test_validate_runs_builds_preflight_on_local_models(make_recipe):
    """The probe: a draft with another vocabulary passed validate, and only build refused it."""
    path = make_recipe("draft_target", backend="reference", models_map={"draft": "draft_other"})
    with pytest.raises(PreflightFailed) as built:
        build(path, dry_run=True, progress=quiet)
    got = check_recipe_file(str(path))
    assert got["ok"] is False and got["field"] == "preflight"
    assert f"preflight {built.value.check}:" in got["error"] and "vocab_size" in got["error"]
    r = CliRunner().invoke(cli, ["recipes", "validate", str(path)])
    assert r.exit_code == 1 and "vocab_size" in r.stdout


def test_validate_reports_the_preflight_it_ran(make_recipe):
    got = check_recipe_file(str(make_recipe("eagle3", backend="reference")))
    assert got["ok"] is True
    assert got["preflight"].endswith("skipped") and not got["preflight"].startswith("0 passed")


def test_validate_leaves_hub_models_to_build(monkeypatch):
    import huggingface_hub

    def no_network(*a, **kw):
        raise AssertionError(f"validate touched the hub: {a}")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", no_network)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", no_network)
    got = check_recipe_file(str(REPO / "recipes" / "llama-3.1-8b-eagle3.yaml"))
    assert got["ok"] is True and "preflight" not in got


def test_dry_run_exits_non_zero_naming_every_missing_path(tmp_path):
    path = tmp_path / "miss.yaml"
    data = {
        "name": "miss",
        "backend": "engine",
        "trtllm_version": "1.1.0",
        "models": {"target": "./nope-target", "draft": str(tmp_path / "gone" / "draft")},
        "speculative": {"mode": "draft_target"},
        "serving": {"decoupled": False},
    }
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    r = CliRunner().invoke(cli, ["build", str(path), "--dry-run", "--workdir", str(tmp_path / "wd")])
    assert r.exit_code != 0
    assert str(tmp_path / "nope-target") in r.stderr and str(tmp_path / "gone" / "draft") in r.stderr
    assert r.stdout == ""  # no runbook for a plan that cannot run
    assert not (tmp_path / "wd").exists()
    r = CliRunner().invoke(cli, ["recipes", "validate", str(path), "--json"])
    assert r.exit_code == 1 and "missing local path" in json.loads(r.stdout)[0]["error"]


def test_max_seq_len_beyond_the_models_positions_is_refused(make_recipe):
    limits = {"max_batch_size": 2, "max_input_len": 64, "max_seq_len": 8192, "max_num_tokens": 256}
    path = make_recipe("none", build=limits)  # the stand-in target has max_position_embeddings 4096
    with pytest.raises(PreflightFailed) as e:
        build(path, dry_run=True, progress=quiet)
    assert e.value.check == "seq-len" and "max_position_embeddings 4096" in str(e.value)
    assert "at most 4096" in e.value.hint
    got = check_recipe_file(str(path))
    assert got["ok"] is False and "seq-len" in got["error"]
