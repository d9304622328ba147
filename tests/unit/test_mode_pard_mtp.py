"""The PARD and MTP modes outside the runtime: their speculative_config per TensorRT-LLM line (parsed
by that line's stand-in, toolkit/build/llmapi_schema.py, transcribed from NVIDIA/TensorRT-LLM
tensorrt_llm/llmapi/llm_args.py @0004396 and the 1.2-era file), the refusal of an MTP target without
MTP layers, the compat cells, PARD's training layout and the MTP layer's export/load round trip."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.repo.conftest import make_recipe
from toolkit import compat, modes
from toolkit.build import PreflightFailed, build, llmapi_schema
from toolkit.errors import ModelError

TINY = Path(__file__).resolve().parents[2] / "models" / "tiny"


def dry_run(tmp_path: Path, mode: str, version: str, target_config: dict | None = None) -> Any:
    models: dict[str, Any] = {}
    for role in ("target", *(["draft"] if mode == "pard" else [])):
        path = tmp_path / "models" / role
        path.mkdir(parents=True, exist_ok=True)
        if role == "target" and target_config is not None:
            (path / "config.json").write_text(json.dumps(target_config))
        models[role] = {"path": str(path)}
    recipe = make_recipe("llmapi", mode, models=models, trtllm_version=version)
    result = build(recipe, workdir=tmp_path, dry_run=True, progress=lambda _m: None)
    return yaml.safe_load(result.llmapi["extra_llm_api_options"])["speculative_config"]


MTP_TARGET = {"model_type": "deepseek_v3", "num_hidden_layers": 6, "num_nextn_predict_layers": 1}


@pytest.mark.parametrize(
    ("version", "want"),
    [
        ("1.3.0", {"decoding_type": "MTP", "max_draft_len": 2}),
        # Up to 1.2 the draft length is num_nextn_predict_layers (1.0.0 docs example).
        ("1.2.1", {"decoding_type": "MTP", "num_nextn_predict_layers": 2}),
    ],
)
def test_mtp_speculative_config_per_line(version: str, want: dict, tmp_path: Path) -> None:
    spec = dry_run(tmp_path, "mtp", version, MTP_TARGET)
    assert spec == want
    assert llmapi_schema.validate(version, spec) is not None


def test_mtp_refuses_a_target_without_mtp_layers(tmp_path: Path) -> None:
    with pytest.raises(PreflightFailed, match="the target has no MTP layers"):
        dry_run(tmp_path, "mtp", "1.3.0", {"model_type": "deepseek_v3", "num_hidden_layers": 6})


def _mtp_checks(tmp_path: Path, version: str, config: dict) -> dict[str, Any]:
    """The mtp-* preflight checks of an llmapi dry run (a failed one raises; its results are kept)."""
    try:
        dry_run(tmp_path, "mtp", version, config)
    except PreflightFailed as e:
        return {r.name: r for r in e.results if r.name.startswith("mtp-")}
    recipe = make_recipe(
        "llmapi", "mtp", models={"target": {"path": str(tmp_path / "models" / "target")}}, trtllm_version=version
    )
    result = build(recipe, workdir=tmp_path, dry_run=True, progress=lambda _m: None)
    return {r["name"]: r for r in result.preflight if r["name"].startswith("mtp-")}


def _status(check: Any) -> str:
    return str(check["status"] if isinstance(check, dict) else check.status)


@pytest.mark.parametrize("version", ["1.2.1", "1.3.0"])
def test_mtp_refuses_an_architecture_tensorrt_llm_has_no_mtp_layer_for(tmp_path: Path, version: str) -> None:
    """A Llama target with MTP weights (what sdtk train-draft makes, and what the reference runtime
    runs) has no MTP layer in TensorRT-LLM: MTPForCausalLM raises "Model type llama not supported for
    MTP" (NVIDIA/TensorRT-LLM tensorrt_llm/_torch/models/modeling_speculative.py @00679c6)."""
    checks = _mtp_checks(tmp_path, version, {**MTP_TARGET, "model_type": "llama"})
    assert _status(checks["mtp-layers"]) == "passed"  # the layers are there; the architecture is not
    family = checks["mtp-family"]
    assert _status(family) == "failed"
    assert "model_type llama" in family.detail and "not supported for MTP" in family.detail
    assert "deepseek_v3" in family.detail and "modeling_speculative.py" in family.detail
    assert "backend: reference" in (family.hint or "")


def test_mtp_accepts_deepseek_and_warns_where_the_release_is_unverified(tmp_path: Path) -> None:
    for version, model_type, want in [
        ("1.2.1", "deepseek_v3", "passed"),  # the 1.0.0 docs example; DeepseekV3MTP in every version read
        ("1.2.1", "deepseek_v32", "passed"),  # 1.2.0 release notes: MTP>1 for DeepSeek V3.2
        ("1.1.0", "deepseek_v32", "warning"),  # before the release notes that name it
        ("1.2.1", "glm4_moe", "warning"),  # in upstream main; not read at the 1.2.1 tag
        ("1.3.0", "qwen3_next", "warning"),
        ("1.2.1", "qwen3_next", "failed"),  # added by PR #12646 (2026-04), after the 1.2 release
    ]:
        checks = _mtp_checks(tmp_path / f"{version}-{model_type}", version, {**MTP_TARGET, "model_type": model_type})
        assert _status(checks["mtp-family"]) == want, (version, model_type)
    # A composite config (Qwen3.5) is read at its text_config, with Qwen3.5's own count key.
    qwen35 = {"model_type": "qwen3_5", "text_config": {"model_type": "qwen3_5_text", "mtp_num_hidden_layers": 1}}
    checks = _mtp_checks(tmp_path / "qwen35", "1.3.0", qwen35)
    assert _status(checks["mtp-layers"]) == "passed" and _status(checks["mtp-family"]) == "warning"
    assert modes.hooks("mtp").preflight is not None


def test_mtp_architecture_is_not_limited_on_the_reference_backend(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({**MTP_TARGET, "model_type": "llama"}))
    recipe = make_recipe("reference", "mtp", models={"target": {"path": str(target)}})
    result = build(recipe, workdir=tmp_path, dry_run=True, progress=lambda _m: None)
    names = {r["name"]: r["status"] for r in result.preflight}
    assert names.get("mtp-layers", "passed") == "passed" and "mtp-family" not in names


def test_pard_speculative_config_on_the_1_3_line(tmp_path: Path) -> None:
    spec = dry_run(tmp_path, "pard", "1.3.0")
    assert spec == {
        "decoding_type": "PARD",
        "max_draft_len": 4,
        "speculative_model": str(tmp_path / "models" / "draft"),
    }
    assert llmapi_schema.validate("1.3.0", spec) is not None


def test_compat_cells() -> None:
    for name in ("pard", "mtp"):
        assert compat.cell(name, "reference").supported and compat.cell(name, "llmapi").supported
        assert not compat.cell(name, "engine").supported
    # PARD arrived in 1.3.0rc7 (release notes); MTP is in every LLM-API release sdtk knows.
    assert modes.info("pard").llmapi.min_version == "1.3.0rc7"
    assert modes.info("mtp").llmapi.min_version is None
    assert modes.hooks("pard").draft_forwards(4) == 1 and modes.hooks("mtp").draft_forwards(3) == 3


def test_pard_training_layout_is_context_plus_masks() -> None:
    """Copy i at position p of the training layout sees exactly x[0..p-i] and i masks: its logits
    equal those of a plain causal forward over that context followed by i mask tokens."""
    import torch
    from transformers import AutoModelForCausalLM

    from toolkit.train import pard

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(str(TINY / "draft"), dtype=torch.float32).eval()
    n, copies, mask = 10, 3, 2
    x = torch.randint(3, 2000, (1, n))
    attn, pos = pard.layout(n, copies)
    ids = torch.cat([x, torch.full((1, (copies - 1) * n), mask)], 1)
    with torch.no_grad():
        got = model(input_ids=ids, attention_mask=attn, position_ids=pos[None]).logits[0]
        for i in range(copies):
            for p in (i, n - 2):
                plain = torch.cat([x[0, : p - i + 1], torch.full((i,), mask)])[None]
                want = model(input_ids=plain).logits[0, -1]
                assert torch.allclose(got[i * n + p], want, atol=1e-4), (i, p)
        loss, metrics = pard.loss(model, x, mask, copies)
    assert float(loss) > 0 and set(metrics) == {"acc1", "acc2", "acc3"}


def test_mtp_export_loads_back_and_a_plain_target_is_refused(tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from toolkit.reference.mtp import load_mtp
    from toolkit.train import mtp

    target = AutoModelForCausalLM.from_pretrained(str(TINY / "target"), dtype=torch.float32).eval()
    trainee = mtp.build(target)
    torch.manual_seed(0)
    with torch.no_grad():
        for p in trainee.mtp.parameters():
            p.add_(0.01 * torch.randn_like(p))
    written = mtp.export(trainee, tmp_path / "mtp", TINY / "target")
    assert (tmp_path / "mtp" / "model.safetensors").is_symlink() and written["keys"] > 4
    assert json.loads((tmp_path / "mtp" / "config.json").read_text())["num_nextn_predict_layers"] == 1
    loaded = load_mtp(tmp_path / "mtp", target, torch.float32)
    emb, hid = torch.randn(1, 5, 256), torch.randn(1, 5, 256)
    with torch.no_grad():
        a, b = trainee.mtp(emb, hid), loaded(emb, hid)
    assert torch.allclose(a, b, atol=1e-2)  # float16 export
    with pytest.raises(ModelError, match="has no MTP layers"):
        load_mtp(TINY / "target", target, torch.float32)
