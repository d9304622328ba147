"""The memory-bound twin (recipe `reference.inflate`): the target's MLP zero-padded N times keeps
its function, with transformers on the unpadded tiny target as the yardstick; drafts and heads
work unchanged; every layer that loads a runtime (engine directory, Triton's draft-target
loader, `sdtk generate`) pads it; reports carry its label."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from toolkit.errors import ModelError
from toolkit.generate import run_generate
from toolkit.membound import recipe_label
from toolkit.recipe import DraftTarget, Eagle3, Medusa, parse_recipe
from toolkit.reference import PLAIN, ReferenceRuntime
from toolkit.reference.models import inflate_mlp, step_bytes
from toolkit.reference.prompts import PROMPTS

torch = pytest.importorskip("torch")

N = 3  # small: the tests' padded target is ~3x the tiny one's MLP, not the recipes' 32x
TOKENS = 24


@pytest.fixture(scope="module")
def twin(tiny: Path) -> Any:
    return ReferenceRuntime.load(
        tiny / "target",
        {"draft": tiny / "draft", "medusa_heads": tiny / "medusa", "eagle_head": tiny / "eagle3"},
        inflate=N,
    )


def test_padded_target_has_the_expected_shapes(tiny: Path, hf_target: Any, twin: Any) -> None:
    padded = twin.target.model
    width = hf_target.config.intermediate_size
    hidden = hf_target.config.hidden_size
    assert padded.config.intermediate_size == N * width
    for plain, grown in zip(hf_target.model.layers, padded.model.layers, strict=True):
        for name in ("gate_proj", "up_proj"):
            w = getattr(grown.mlp, name).weight
            assert w.shape == (N * width, hidden)
            assert torch.equal(w[:width], getattr(plain.mlp, name).weight)
            assert not w[width:].any()
        down = grown.mlp.down_proj.weight
        assert down.shape == (hidden, N * width)
        assert torch.equal(down[:, :width], plain.mlp.down_proj.weight) and not down[:, width:].any()
    # Everything but the MLPs is the tiny target's, and the step reads the extra MLP bytes.
    mlp_bytes = 3 * width * hidden * 4 * len(padded.model.layers)
    assert step_bytes(padded) == step_bytes(hf_target) + (N - 1) * mlp_bytes
    assert twin.inflate == N and twin.twin_label.startswith(f"memory-bound twin: target padded ×{N}, ")


def test_padded_target_greedy_output_equals_transformers_on_the_tiny_target(
    tiny: Path, hf_target: Any, twin: Any, prompt_ids: list[list[int]]
) -> None:
    padded = copy.deepcopy(hf_target)
    inflate_mlp(padded, N)
    ids = torch.tensor([prompt_ids[0]])
    with torch.inference_mode():
        assert torch.allclose(padded(ids).logits, hf_target(ids).logits, atol=1e-4)
        for p in prompt_ids[:3]:
            want = hf_target.generate(torch.tensor([p]), do_sample=False, max_new_tokens=TOKENS)[0, len(p) :]
            got = padded.generate(torch.tensor([p]), do_sample=False, max_new_tokens=TOKENS)[0, len(p) :]
            assert got.tolist() == want.tolist()
            # The reference runtime on the twin, plain and speculative: the same tokens.
            assert twin.generate(p, TOKENS, spec=PLAIN).token_ids == want.tolist()


@pytest.mark.parametrize("mode", ["draft_target", "eagle3", "medusa"])
def test_drafts_and_heads_work_unchanged_on_the_twin(
    twin: Any, runtime: Any, prompt_ids: list[list[int]], mode: str
) -> None:
    spec = {
        "draft_target": DraftTarget(mode="draft_target", max_draft_len=4),
        "eagle3": Eagle3(mode="eagle3", max_draft_len=3),
        "medusa": Medusa(mode="medusa", medusa_choices=[[0], [1], [0, 0]]),
    }[mode]
    p = prompt_ids[1]
    plain = runtime.generate(p, TOKENS, spec=PLAIN).token_ids
    got = twin.generate(p, TOKENS, spec=spec)
    assert got.token_ids == plain
    assert got.stats.accepted_tokens > 0  # the unpadded draft/heads still predict the padded target


def test_every_loader_pads_the_target(tiny: Path, tmp_path: Path, twin: Any) -> None:
    data = {
        "backend": "reference",
        "models": {"target": str(tiny / "target"), "draft": str(tiny / "draft")},
        "speculative": {"mode": "draft_target", "max_draft_len": 2},
        "reference": {"inflate": N},
        "dtype": "float32",
        "build": {"max_input_len": 512, "max_seq_len": 1024},
    }
    recipe = parse_recipe(data, path=tmp_path / "r.yaml")
    assert recipe_label(recipe) == twin.twin_label  # config.json arithmetic == the loaded weights

    from toolkit.build import build

    r = build(recipe, workdir=tmp_path / "wd", progress=lambda _: None)
    target_cfg = json.loads((Path(r.outputs["target"]) / "config.json").read_text())
    draft_cfg = json.loads((Path(r.outputs["draft"]) / "config.json").read_text())
    assert target_cfg["reference"]["inflate"] == N and draft_cfg["reference"]["inflate"] == 1
    loaded = ReferenceRuntime.from_engine_dir(Path(r.outputs["target"]))
    assert loaded.inflate == N and loaded.twin_label == twin.twin_label
    # `sdtk generate` (in process, from the recipe) loads the twin too: the same tokens.
    out = run_generate(
        recipe, PROMPTS[0], 8, no_speculation=True, temperature=0.0, top_k=0, top_p=1.0, seed=None
    )
    ids = loaded.tokenizer(PROMPTS[0])["input_ids"]
    assert out["token_ids"] == twin.generate(ids, 8, spec=PLAIN).token_ids


def test_a_model_without_a_gated_mlp_is_refused() -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=32, n_positions=16))
    with pytest.raises(ModelError, match="gate/up/down"):
        inflate_mlp(gpt2, 2)


def test_padded_projections_run_one_kernel(twin: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every padded projection takes the matrix-matrix kernel: a one-row product is made over two
    rows (the second zero) and its first row kept, so a twin step over 1 token runs the kernel a
    verify step over 2 to 8 tokens runs (the CPU's matrix-vector discount is not a GPU's). The
    kept row equals a plain Linear's."""
    from toolkit.reference.models import MatrixLinear

    mlp = twin.target.model.get_decoder().layers[0].mlp
    lins = [mlp.gate_proj, mlp.up_proj, mlp.down_proj]
    assert all(type(lin) is MatrixLinear for lin in lins)
    rows: list[int] = []
    real = torch.nn.functional.linear

    def spy(x, w, b=None):
        rows.append(x.reshape(-1, x.shape[-1]).shape[0])
        return real(x, w, b)

    monkeypatch.setattr(torch.nn.functional, "linear", spy)
    gate = mlp.gate_proj
    for shape in ((1, 1), (1, 3), (2, 1)):
        x = torch.randn(*shape, gate.in_features, generator=torch.Generator().manual_seed(len(rows)))
        rows.clear()
        y = gate(x)
        assert rows == [max(2, shape[0] * shape[1])]
        assert y.shape == (*shape, gate.out_features)
        torch.testing.assert_close(y, real(x, gate.weight, gate.bias), rtol=1e-5, atol=1e-5)
