"""`sdtk train-draft` end to end on the tiny family: a handful of ModelOpt EAGLE-3 steps on a few
self-distilled prompts, the exported head through `sdtk build` and a served deployment whose
validation (speculative output == the target's greedy output) passes, and `--resume`.

Training is minute-sized and never timed; the numbers it prints are checked for shape and range,
not for value (a 2-step head is no better than the shipped one)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from toolkit.cli import cli

pytestmark = [pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
RECIPE = str(ROOT / "recipes" / "tiny-eagle3.yaml")
PROMPTS = [
    "def read_config(path):",
    "class LRUCache:",
    "import os\nimport sys\n\ndef main():",
    "Write a short poem about the sea.",
    "Explain what a hash table is.",
    "for i in range(10):",
]


def _train(out: Path, prompts: Path, *extra: str):
    args = ["train-draft", RECIPE, "--data", str(prompts), "--out", str(out), "--holdout", "0.3"]
    args += ["--batch-size", "2", "--seq-len", "48", "--gen-tokens", "12", "--eval-tokens", "8", "--json"]
    r = CliRunner().invoke(cli, [*args, *extra], catch_exceptions=False)
    assert r.exit_code == 0, r.output[-3000:]
    report = json.loads((out / "train_report.json").read_text())
    printed = json.loads(r.stdout)  # stdout is the JSON alone (ModelOpt's prints go to stderr)
    assert printed["next"] == report["next"] and printed["next"].startswith(f"sdtk bench --compare {RECIPE} ")
    return report


@pytest.mark.tritonserver
def test_train_draft_eagle3_builds_serves_losslessly_and_resumes(tmp_path):
    from safetensors import safe_open
    from triton_support import live_deployment

    from toolkit.build import build
    from toolkit.recipe import load_recipe
    from toolkit.train.eagle3 import EXPORT_KEYS

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p, "max_tokens": 12}) + "\n" for p in PROMPTS))
    out = tmp_path / "td"
    rep = _train(out, prompts, "--max-steps", "2", "--checkpoint-every", "1")

    # split: 2 of 6 prompts held out, none of them trained on
    assert (rep["data"]["train_prompts"], rep["data"]["holdout_prompts"]) == (4, 2)
    held = {json.loads(x)["prompt"] for x in (out / "data" / "holdout.jsonl").read_text().splitlines()}
    trained = {json.loads(x)["prompt"] for x in (out / "data" / "train.jsonl").read_text().splitlines()}
    assert held and not held & trained and held | trained == set(PROMPTS)
    # self-distillation: the target's own greedy continuation, cached with its input hash
    sd = rep["data"]["self_distillation"]
    assert sd["cached"] is False and Path(sd["path"]).name.startswith("selfdistill-" + sd["input_hash"][:16])
    # before/after from plan's probe: one acceptance per draft position (γ=3), τ in [1, 4]
    for side in ("before", "after"):
        m = rep["holdout"][side]
        assert len(m["per_position_acceptance"]) == 3 and 1.0 <= m["tau"] <= 4.0
        assert m["predicted_speedup"] > 0 and m["prompts"] == 2
    assert rep["training"]["steps"] == 2 and rep["training"]["stopped"] == "max_steps"

    # the official EAGLE-3 layout, as the shipped head has it
    with safe_open(str(out / "eagle3" / "model.safetensors"), "pt") as f:
        assert sorted(f.keys()) == sorted(EXPORT_KEYS)
        assert str(f.get_tensor("d2t").dtype) == "torch.int64"
        assert str(f.get_tensor("fc.weight").dtype) == "torch.float16"
    cfg = json.loads((out / "eagle3" / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["draft_vocab_size"] == 1024

    overlay = load_recipe(rep["overlay"])
    assert overlay.local_path(overlay.models.eagle_head) == (out / "eagle3").resolve()
    assert overlay.local_path(overlay.models.target) == (ROOT / "models" / "tiny" / "target").resolve()
    built = build(overlay, workdir=tmp_path / "build")
    assert built.outputs, built
    with live_deployment(overlay, tmp_path / "deploy", validate=True) as dep:
        checks = {c["name"]: c["status"] for c in dep.validation["checks"]}
        assert checks["correctness"] == "passed", dep.validation
        assert dep.validation["acceptance"]["accepted_tokens"] > 0, dep.validation
        # --generate-with: the deployment generates the same self-distillation data as the reference
        # runtime did (lossless serving: the target's own greedy continuation)
        from transformers import AutoTokenizer

        from toolkit.train.data import TrainPrompt, self_distill

        cached = [json.loads(x) for x in Path(sd["path"]).read_text().splitlines()][:2]
        ps = [TrainPrompt(c["prompt"], "x", 12) for c in cached]
        served, info = self_distill(
            ps, target=ROOT / "models" / "tiny" / "target", cache_dir=tmp_path / "gw", max_new=12,
            generate_with=dep.http_url,
        )  # fmt: skip
        assert info["source"].startswith("endpoint:") and info["cached"] is False
        tok = AutoTokenizer.from_pretrained(str(ROOT / "models" / "tiny" / "target"))
        for c, e in zip(cached, served, strict=True):
            assert e.prompt_ids == c["prompt_ids"]
            assert tok.decode(e.output_ids) == tok.decode(c["output_ids"])

    # --resume continues from the saved step (2) to the new budget, with the cached data
    rep2 = _train(out, prompts, "--max-steps", "3", "--checkpoint-every", "1", "--resume")
    assert rep2["training"]["resumed_from"] == 2 and rep2["training"]["steps"] == 3
    assert [e["step"] for e in rep2["training"]["log"]] == [1, 2, 3]
    assert rep2["training"]["log"][:2] == rep["training"]["log"]
    assert rep2["data"]["self_distillation"]["cached"] is True


@pytest.mark.parametrize(
    ("recipe", "artifact"),
    [("tiny-medusa", "medusa"), ("tiny-draft-target", "draft")],
    ids=["medusa", "draft"],
)
def test_train_draft_medusa_and_draft_export_and_stay_lossless(tmp_path, recipe, artifact):
    """Medusa heads (FasterDecoding layout) and a distilled draft: a few steps, exported where the
    overlay points, loaded by the reference runtime, whose speculative output equals its greedy one."""
    from toolkit.recipe import load_recipe
    from toolkit.reference import PLAIN, ReferenceRuntime

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p, "max_tokens": 12}) + "\n" for p in PROMPTS))
    out = tmp_path / "td"
    args = [
        "train-draft",
        str(ROOT / "recipes" / f"{recipe}.yaml"),
        "--data",
        str(prompts),
        "--out",
        str(out),
    ]
    args += ["--holdout", "0.3", "--batch-size", "2", "--seq-len", "48", "--gen-tokens", "12"]
    args += ["--eval-tokens", "8", "--max-steps", "2", "--json"]
    r = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert r.exit_code == 0, r.output[-3000:]
    rep = json.loads(r.stdout)
    assert rep["training"]["steps"] == 2 and rep["artifact"] == str(out / artifact)
    shipped = ROOT / "models" / "tiny" / artifact
    if artifact == "medusa":
        from safetensors import safe_open

        with (
            safe_open(str(out / "medusa" / "model.safetensors"), "pt") as f,
            safe_open(str(shipped / "model.safetensors"), "pt") as g,
        ):
            assert sorted(f.keys()) == sorted(g.keys())  # the FasterDecoding keys of the shipped heads
        assert (out / "medusa" / "medusa_lm_head.safetensors").resolve() == (
            out / "medusa" / "model.safetensors"
        )
    else:
        assert (out / "draft" / "tokenizer.json").read_bytes() == (shipped / "tokenizer.json").read_bytes()
    rec = load_recipe(rep["overlay"])
    m = rec.models
    rt = ReferenceRuntime.load(
        rec.local_path(m.target),
        {
            "draft": rec.local_path(m.draft) if m.draft else None,
            "medusa_heads": rec.local_path(m.medusa_heads) if m.medusa_heads else None,
        },
        spec=rec.speculative,
    )
    for text in PROMPTS[:3]:
        ids = rt.tokenizer(text)["input_ids"]
        spec = rt.generate(ids, 24, end_id=-1)
        assert spec.stats.draft_tokens > 0  # it did speculate
        assert spec.token_ids == rt.generate(ids, 24, spec=PLAIN, end_id=-1).token_ids
