"""`sdtk selftest --json` on CPU: without TensorRT-LLM it runs the reference backend on random-weight
checkpoints it writes itself (build, real Triton deploy, validate against the in-process target,
short bench, stop). CI runs two modes to stay within ~90 s: one behind the ensemble repository
(medusa, an engine-path mode) and one behind the llmapi repository (eagle3, an llmapi-path mode),
as TensorRT-LLM 1.2.1 (the newest verified container's, selftest.WOULD_RUN) would run them."""

from __future__ import annotations

import json

import pytest
import yaml

from .test_deploy import sdtk, triton_processes

pytestmark = [pytest.mark.tritonserver, pytest.mark.slow]


def test_selftest_reference_two_modes(tmp_path):
    r = sdtk("selftest", "--mode", "eagle3", "--mode", "medusa", "--workdir", str(tmp_path), "--json")
    assert r.returncode == 0, r.stderr[-3000:] + r.stdout[-3000:]
    out = json.loads(r.stdout)
    assert out["ok"] and out["trtllm_version"] is None
    assert out["backends"] == ["reference", "reference-llmapi"]
    assert "not installed" in out["note"]
    rows = {(x["mode"], x["backend"]): x for x in out["results"]}
    assert set(rows) == {("eagle3", "reference-llmapi"), ("medusa", "reference")}
    for row in rows.values():
        assert row["steps"] == {s: "passed" for s in ("build", "deploy", "validate", "bench", "stop")}
        checks = {c["name"]: c["status"] for c in row["details"]["validation"]["checks"]}
        assert checks["correctness"] == "passed"  # greedy speculative == target-only
    # The twin serves TensorRT-LLM 1.2.1's repository (the version it stands in for): the llmapi model
    # returns no token counts, so the bench counts with the tokenizer; 1.2's tensorrt_llm declares
    # num_output_tokens (tests/contracts/trtllm-1.2.json), so the server's count is used there.
    assert rows[("eagle3", "reference-llmapi")]["details"]["bench_token_counts"] == ["tokenizer"]
    assert rows[("medusa", "reference")]["details"]["bench_token_counts"] == ["server"]
    model_yaml = tmp_path / "work/selftest-reference-llmapi-eagle3/triton_repo/tensorrt_llm/1/model.yaml"
    assert "decoding_type: Eagle3\n" in model_yaml.read_text()  # 1.2's name (1.1: Eagle)
    # What a TensorRT-LLM 1.2.1 container (26.07) would run instead.
    would = {(x["mode"], x["backend"]) for x in out["would_run_with_trtllm"]}
    assert {
        ("medusa", "engine"),
        ("draft_target", "engine"),
        ("eagle3", "llmapi"),
        ("ngram", "llmapi"),
    } <= would
    # The checkpoints carry the upstream EAGLE-3 config keys.
    eagle = json.loads((tmp_path / "checkpoints/eagle_head/config.json").read_text())
    assert eagle["architectures"] == ["LlamaForCausalLMEagle3"] and "draft_vocab_size" in eagle
    assert eagle["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    # Head sizes TensorRT-LLM's attention kernels have (instantiated for 32-256; none for 16).
    for role in ("target", "draft", "eagle_head"):
        cfg = json.loads((tmp_path / f"checkpoints/{role}/config.json").read_text())
        assert cfg["head_dim"] == 64 and cfg["hidden_size"] == 64 * cfg["num_attention_heads"], role
    assert triton_processes(tmp_path) == []


def test_selftest_plan_with_trtllm():
    """Stand-in versions (TensorRT-LLM cannot be installed here): which (mode, backend) pairs run."""
    from toolkit.selftest import WOULD_RUN
    from toolkit.selftest.run import plan_modes

    assert WOULD_RUN == "1.2.1"  # the newest verified container's (26.07)
    v12 = plan_modes(WOULD_RUN)
    # Without TensorRT-LLM: what 1.2.1 would run, engine-path modes (deprecated there, still shipped)
    # behind the reference ensemble repository, llmapi-path modes behind the reference llmapi one.
    assert plan_modes(None) == [(m, "reference" if b == "engine" else "reference-llmapi") for m, b in v12]
    assert ("medusa", "engine") in v12 and ("eagle3", "llmapi") in v12 and ("none", "engine") in v12
    assert plan_modes("1.1.0") == v12
    v09 = plan_modes("0.19.0")
    assert all(b == "engine" for _, b in v09)
    # the engine path ships through 1.2.x, deprecated (NVIDIA/TensorRT-LLM PR #11723; NGC 26.03-26.07), and
    # the 1.3 line removed it (PRs #15907, #15918); 1.2.0rc2 is a 1.2
    assert ("medusa", "engine") in plan_modes("1.2.0rc2") and ("medusa", "engine") in plan_modes("1.2.1")
    assert all(b == "llmapi" for _, b in plan_modes("1.3.0"))
    # The cells come from each mode's ModeInfo.selftest, on the support matrix: SA (the 1.3 line) and
    # PARD (1.3.0rc7) only from 1.3; MTP on every llmapi release, on its DeepSeek-V3 target (the
    # family TensorRT-LLM's MTP has in every release, toolkit.modes.mtp VERIFIED).
    new = {("sa", "llmapi"), ("pard", "llmapi"), ("mtp", "llmapi")}
    assert new <= set(plan_modes("1.3.0")) and new <= set(plan_modes("1.3.0rc24"))
    assert set(plan_modes("1.2.1")) & new == {("mtp", "llmapi")}
    assert plan_modes(None, "1.3.0") == [(m, "reference-llmapi") for m, _ in plan_modes("1.3.0")]


def test_selftest_reference_new_modes(tmp_path):
    """SA, PARD and MTP, the cells TensorRT-LLM 1.3 runs on the llmapi path, on the reference llmapi
    twin (--stand-in 1.3.0): PARD on the self-test's random draft (mask token <pad>), MTP on the
    self-test's DeepSeek-V3 target with one MTP layer; the same greedy-equality check as on a GPU."""
    r = sdtk(
        "selftest", "--mode", "sa", "--mode", "pard", "--mode", "mtp", "--stand-in", "1.3.0",
        "--workdir", str(tmp_path), "--json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:] + r.stdout[-3000:]
    out = json.loads(r.stdout)
    assert out["ok"] and out["trtllm_version"] is None and "TensorRT-LLM 1.3.0" in out["note"]
    rows = {(x["mode"], x["backend"]): x for x in out["results"]}
    assert set(rows) == {("sa", "reference-llmapi"), ("pard", "reference-llmapi"), ("mtp", "reference-llmapi")}
    for row in rows.values():
        assert row["steps"] == {s: "passed" for s in ("build", "deploy", "validate", "bench", "stop")}
        checks = {c["name"]: c["status"] for c in row["details"]["validation"]["checks"]}
        assert checks["correctness"] == "passed"  # greedy speculative == target-only
    would = {(x["mode"], x["backend"]) for x in out["would_run_with_trtllm"]}
    assert {("sa", "llmapi"), ("pard", "llmapi"), ("mtp", "llmapi")} <= would
    work = tmp_path / "work"
    spec = {}
    for mode in ("sa", "pard", "mtp"):
        text = (work / f"selftest-reference-llmapi-{mode}/triton_repo/tensorrt_llm/1/model.yaml").read_text()
        spec[mode] = yaml.safe_load(text)["speculative_config"]
    assert spec["sa"] == {"decoding_type": "SA", "max_draft_len": 4}
    assert spec["pard"]["decoding_type"] == "PARD" and spec["pard"]["mask_token_id"] == 2
    assert spec["pard"]["speculative_model"] == str(tmp_path / "checkpoints" / "draft")
    assert spec["mtp"] == {"decoding_type": "MTP", "max_draft_len": 2}  # 1.3's key
    mtp_model = yaml.safe_load((work / "selftest-reference-llmapi-mtp/triton_repo/tensorrt_llm/1/model.yaml").read_text())
    assert mtp_model["model"] == str(tmp_path / "checkpoints" / "mtp_target")
    assert triton_processes(tmp_path) == []


def test_selftest_stand_in_is_refused_with_trtllm_installed_and_with_dry_run(tmp_path, monkeypatch):
    from toolkit import compat
    from toolkit.errors import UsageError
    from toolkit.selftest.run import selftest

    monkeypatch.setattr(compat, "installed_trtllm_version", lambda: "1.2.1")
    with pytest.raises(UsageError, match="TensorRT-LLM 1.2.1 is installed") as err:
        selftest(modes=["sa"], workdir=tmp_path, stand_in="1.3.0", progress=lambda _m: None)
    assert "--reference" in (err.value.hint or "")
    r = sdtk("selftest", "--dry-run", "--stand-in", "1.3.0")
    assert r.returncode != 0 and "--stand-in goes without --dry-run" in r.stderr


def test_selftest_reports_the_failing_step_with_its_log_tail(tmp_path):
    """A head whose weights cannot be read: the build (configs only) passes, tritonserver fails to
    load the model, and the row says deploy failed, with the server log's tail in the table."""
    from toolkit.selftest.checkpoints import make_checkpoints
    from toolkit.selftest.run import SelftestResult, run_mode, selftest_recipe

    paths = make_checkpoints(tmp_path / "checkpoints")
    (paths["eagle_head"] / "model.safetensors").write_bytes(b"not safetensors")
    recipe = selftest_recipe("eagle3", "reference", paths, None)
    res, kept = run_mode("eagle3", "reference", recipe, tmp_path / "work", progress=lambda _m: None)
    assert kept is None and not res.ok and res.failed_step == "deploy"
    assert res.steps == {"build": "passed", "deploy": "failed", "validate": "skipped", "bench": "skipped",
                         "stop": "skipped"}  # fmt: skip
    assert "SafetensorError" in res.error and "failed to load all models" in res.log_tail
    table = SelftestResult(None, ["reference"], "", {}, [res], []).table()
    assert "eagle3 (reference) failed at deploy:" in table and "failed to load all models" in table
    assert triton_processes(tmp_path) == []
