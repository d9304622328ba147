"""The lean Llama forward (toolkit.reference.lean) against transformers' own, bit for bit.

Every check runs the same steps twice on the same model, once through LeanDecoder and once
through transformers' LlamaModel.forward (CachedLM with `lean` set to None), and asserts that
logits, hidden states and captured layers are *equal*, not close: the reference's losslessness
is argued against transformers' greedy output, so its forward may not differ by a rounding."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")


def _pair(model: Any, capture: tuple[int, ...] = ()) -> tuple[Any, Any]:
    from toolkit.reference.models import CachedLM

    lean, hf = CachedLM(model, capture=capture), CachedLM(model, capture=capture)
    assert lean.lean is not None, lean.lean_refusal
    # A greedy step's float32 output head (no bias) writes into a buffer; others run lm_head.
    head = lean.lm_head
    assert (lean._head_wt is not None) == (head.weight.dtype == torch.float32 and head.bias is None)
    hf.lean = hf._head_wt = None  # transformers' forward, then lm_head's own call
    return lean, hf


def _same(a: Any, b: Any) -> None:
    for name in ("logits", "hidden", "aux"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            assert x.dtype == y.dtype and x.shape == y.shape, name
            assert torch.equal(x, y), f"{name} differs by up to {(x.float() - y.float()).abs().max().item()}"


def _argmaxes(fwd: Any) -> list[int]:
    """Each row's argmax: the forward's own (run(..., argmax=True) with the head's buffer), else
    its logits'."""
    return fwd.argmax if fwd.argmax is not None else fwd.logits.argmax(-1).tolist()


def _steps(lean: Any, hf: Any, prompt: list[int]) -> None:
    """A generation's kinds of step, each on both: prefill, one-token steps, a chain after the
    context, a tree (with a keep of non-prefix rows), captured layers, greedy_next/greedy_chain,
    and greedy verification's argmaxes (from the output head's buffer on the lean side)."""
    from toolkit.reference.models import tree_shape

    kw = {"hidden": True, "aux": bool(lean.capture)}
    _same(lean.forward(prompt, **kw), hf.forward(prompt, **kw))
    for tok in (5, 17, 300, 2000):
        _same(lean.forward([tok], **kw), hf.forward([tok], **kw))
    _same(lean.forward([7, 8, 9, 10, 11], **kw), hf.forward([7, 8, 9, 10, 11], **kw))
    _same(
        lean.forward([12, 13, 14, 15, 16], logits_from=2, **kw),
        hf.forward([12, 13, 14, 15, 16], logits_from=2, **kw),
    )
    parents = [-1, 0, 0, 1, 1, 2, 3]
    start = lean.length
    _same(
        lean.forward(list(range(40, 47)), parents=parents, **kw),
        hf.forward(list(range(40, 47)), parents=parents, **kw),
    )
    for lm in (lean, hf):
        lm.keep(start, [0, 2, 5])
    _same(lean.forward([21, 22], **kw), hf.forward([21, 22], **kw))
    assert lean.greedy_next([23]) == hf.greedy_next([23])
    assert lean.greedy_chain([24, 25], 6) == hf.greedy_chain([24, 25], 6)
    with torch.inference_mode():
        assert lean._rows([26, 27, 28, 29]) == hf._rows([26, 27, 28, 29])
        fast = lean._head_wt is not None
        a, b = (
            lean.run([30, 31, 32, 33, 34], None, argmax=True),
            hf.run([30, 31, 32, 33, 34], None, argmax=True),
        )
        assert b.argmax is None and b.logits is not None  # no buffer: the logits, as without argmax
        assert (a.argmax is not None, a.logits is None) == (fast, fast)
        assert _argmaxes(a) == b.logits.argmax(-1).tolist()
        tree = tree_shape((-1, 0, 0, 1))
        a, b = lean.run([35, 36, 37, 38], tree, argmax=True), hf.run([35, 36, 37, 38], tree)
        assert _argmaxes(a) == b.logits.argmax(-1).tolist()
        # The buffer's rows are lm_head's output bit for bit (nn.Linear without a bias is a matmul).
        for q in (1, 3, 7, 20) if fast else ():
            h = torch.randn(1, q, lean.lm_head.in_features, generator=torch.Generator().manual_seed(q))
            assert torch.equal(torch.from_numpy(lean._head_rows(h, q).copy()), lean.lm_head(h)[0])
    assert lean.length == hf.length


def test_lean_forward_equals_transformers_on_every_step_kind(
    runtime: Any, prompt_ids: list[list[int]]
) -> None:
    """The tiny target and draft: every kind of step a generation runs gives the same bits."""
    for model in (runtime.target.model, runtime.draft.model):
        lean, hf = _pair(model)
        _steps(lean, hf, prompt_ids[1])


def test_lean_forward_captures_the_layers_transformers_hooks_capture(
    runtime: Any, prompt_ids: list[list[int]]
) -> None:
    """EAGLE-3's captured layers (hooks in transformers' forward, taken in the loop here)."""
    lean, hf = _pair(runtime.target.model, capture=tuple(runtime.target.capture))
    assert lean.capture and lean._hooks
    _steps(lean, hf, prompt_ids[3])


def test_lean_forward_on_the_memory_bound_twin_and_in_bfloat16(
    tiny: Any, prompt_ids: list[list[int]]
) -> None:
    """The padded target (its MLP projections are MatrixLinear, called as modules) and a bfloat16
    target (RMSNorm's casts and RoPE's cast to the model's dtype)."""
    from toolkit.reference.models import MatrixLinear, inflate_mlp, load_causal_lm

    padded = load_causal_lm(tiny / "target", "target")
    inflate_mlp(padded, 2)
    assert isinstance(padded.get_decoder().layers[0].mlp.gate_proj, MatrixLinear)
    _steps(*_pair(padded), prompt_ids[0])
    bf16 = load_causal_lm(tiny / "target", "target", torch.bfloat16)
    _steps(*_pair(bf16), prompt_ids[0])


LLAMA_VARIANTS = {
    "float16": ({}, "float16"),
    "biases": ({"attention_bias": True, "mlp_bias": True}, "float32"),
    "multi-head (no GQA)": ({"num_key_value_heads": 4}, "float32"),
    "RoPE linear": ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "float32"),
    "RoPE llama3": (
        {
            "rope_scaling": {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            }
        },
        "float32",
    ),
    "RoPE yarn (attention scaling)": (
        {"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}},
        "bfloat16",
    ),
}


@pytest.mark.parametrize("variant", list(LLAMA_VARIANTS))
def test_lean_forward_equals_transformers_on_llama_variants(variant: str) -> None:
    """Llama configurations the tiny models do not have (random weights, 2 layers): float16,
    projection biases, multi-head attention, and RoPE kinds whose table is fixed at load, one
    with an attention scaling other than 1."""
    from transformers import LlamaConfig, LlamaForCausalLM

    extra, dtype = LLAMA_VARIANTS[variant]
    base = {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 2100,
        "max_position_embeddings": 512,
    }
    torch.manual_seed(0)
    cfg = LlamaConfig(**{**base, **extra})
    cfg._attn_implementation = "sdpa"
    model = LlamaForCausalLM(cfg).to(getattr(torch, dtype)).eval()
    if variant.startswith("RoPE yarn"):
        assert model.get_decoder().rotary_emb.attention_scaling != 1.0
    prompt = torch.randint(0, 2100, (40,), generator=torch.Generator().manual_seed(1)).tolist()
    _steps(*_pair(model), prompt)


def test_lean_batched_forward_equals_transformers_layers(runtime: Any, prompt_ids: list[list[int]]) -> None:
    """The in-flight batcher's padded forward (additive masks, per-row positions, KV slots): rows
    of different lengths, a tree row, a padded row and captured layers, through both paths."""
    from toolkit.reference.batching import SlotLM, SlotPool, Step, batched_forward
    from toolkit.reference.models import CachedLM

    results = []
    for use_lean in (True, False):
        lm = CachedLM(runtime.target.model, capture=tuple(runtime.target.capture))
        if not use_lean:
            lm.lean = None
        pool = SlotPool(lm, 3, 256)
        views = [SlotLM(None, pool, s) for s in range(3)]  # type: ignore[arg-type]
        out = []
        for v, ids in zip(views, prompt_ids[:3], strict=True):
            out += batched_forward(pool, [Step(v, ids, None, 0, True, True)])
        out += batched_forward(
            pool,
            [
                Step(views[0], [5], None, 0, True, True),
                Step(views[1], [6, 7, 8, 9], [-1, 0, 0, 1], 0, True, True),
                Step(views[2], [10, 11], None, 1, True, True),
            ],
        )
        results.append(out)
    for a, b in zip(*results, strict=True):
        _same(a, b)


def test_generation_is_the_same_through_either_forward(
    runtime: Any, prompt_ids: list[list[int]], specs: Any
) -> None:
    """Whole speculative generations (each mode) give the same tokens and the same acceptance
    through LeanDecoder as through transformers' forward."""
    target, draft = runtime.target, runtime.draft
    saved = (target.lean, draft.lean)
    heads = (target._head_wt, draft._head_wt)
    try:
        for name, spec in specs.items():
            outs = []
            for lean in (True, False):
                target.lean = saved[0] if lean else None
                draft.lean = saved[1] if lean else None
                target._head_wt = heads[0] if lean else None
                draft._head_wt = heads[1] if lean else None
                r = runtime.generate(prompt_ids[4], 24, spec=spec, end_id=-1)
                outs.append((r.token_ids, r.stats.accepted_tokens, r.stats.steps))
            assert outs[0] == outs[1], name
    finally:
        target.lean, draft.lean = saved
        target._head_wt, draft._head_wt = heads


def test_lean_refuses_what_it_was_not_written_from(tiny: Any, monkeypatch: Any) -> None:
    """Another attention implementation, a hook it would skip, and the switch back to
    transformers' forward each leave the model on transformers' forward, with the reason."""
    from toolkit.reference.lean import HF_FORWARD_ENV, refusal
    from toolkit.reference.models import CachedLM, load_causal_lm

    model = load_causal_lm(tiny / "target", "target")
    assert refusal(model) == ""
    model.config._attn_implementation = "eager"
    assert "eager" in refusal(model)
    model.config._attn_implementation = "sdpa"

    def hook(*args: Any) -> None:
        pass

    handle = model.get_decoder().layers[2].mlp.register_forward_hook(hook)
    assert refusal(model) == "a module of the model has hooks"
    assert refusal(model, lambda h: h is hook) == ""
    handle.remove()
    pre = model.get_decoder().layers[0].register_forward_pre_hook(hook)
    assert refusal(model, lambda h: h is hook) == "a module of the model has hooks"
    pre.remove()
    model.train()
    assert refusal(model) == "the model is in training mode"
    model.eval()
    model.get_decoder().layers[1].mlp.train()  # dropout in one submodule is enough
    assert refusal(model) == "the model is in training mode"
    model.eval()
    mlp = model.get_decoder().layers[0].mlp
    mlp.forward = lambda x: x  # type: ignore[method-assign]  # an instance patch, as accelerate's offloading makes
    assert refusal(model) == "a LlamaMLP of the model has its forward replaced"
    del mlp.forward
    model.config.is_causal = False
    assert refusal(model) == "the model is configured as not causal"
    model.config.is_causal = True
    assert CachedLM(model, capture=[1]).lean is not None  # its own capture hooks are fine
    monkeypatch.setenv(HF_FORWARD_ENV, "1")
    assert refusal(model) == f"{HF_FORWARD_ENV}=1"
    assert CachedLM(model).lean is None


def test_lean_refuses_other_architectures() -> None:
    """A decoder that is not transformers' own LlamaModel runs transformers' forward."""
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
    from transformers.models.llama import modeling_llama

    from toolkit.reference.lean import refusal

    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=32)).eval()
    assert refusal(gpt2) == "GPT2Model is not transformers' LlamaModel"

    class MyAttention(modeling_llama.LlamaAttention):
        pass

    cfg = LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        vocab_size=64,
    )
    cfg._attn_implementation = "sdpa"
    llama = LlamaForCausalLM(cfg).eval()
    assert refusal(llama) == ""
    layer = llama.get_decoder().layers[1]
    layer.self_attn = MyAttention(cfg, 1)
    assert refusal(llama) == "MyAttention is not transformers' LlamaAttention"
    dynamic = LlamaForCausalLM(
        LlamaConfig(**{**cfg.to_dict(), "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}})
    ).eval()
    assert "changes with the sequence" in refusal(dynamic)
