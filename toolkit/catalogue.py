"""Architecture facts for every checkpoint named in the bundled recipes (recipes/*.yaml).

Used when a checkpoint cannot be resolved (offline, gated, not downloaded yet), so that
`sdtk build --dry-run` can still plan, estimate memory and check head/base fit. Each entry
names where its numbers come from; the output of `sdtk build` says when these numbers
(rather than the checkpoint's own config.json) were used.

Sources, per entry:
- the model's Hugging Face `config.json` (read through copies of it in public code where the
  hub itself was out of reach; the copy is named), and
- for the speculative heads, the upstream code that defines their shapes (named per entry).

Parameter counts are the published totals; `tests/build/test_hub.py` checks that
`hub.estimate_parameters` reproduces them from the architecture numbers.
"""

from __future__ import annotations

from typing import Any

from toolkit.modes import EAGLE, EAGLE3, MEDUSA, MEDUSA_HEAD_MODEL_TYPE

# Keys follow Hugging Face config.json names where one exists.
_ENTRIES: dict[str, dict[str, Any]] = {
    # huggingface.co/meta-llama/Llama-3.1-8B-Instruct/blob/main/config.json: the same
    # dimensions appear in the EAGLE-3 head config quoted in NVIDIA/TensorRT-LLM issue #6158
    # (hidden 4096, intermediate 14336, 32 heads, 8 KV heads, head_dim 128, vocab 128256,
    # max_position_embeddings 131072, rope llama3 factor 8).
    "meta-llama/llama-3.1-8b-instruct": {
        "architecture": "LlamaForCausalLM",
        "model_type": "llama",
        "vocab_size": 128256,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "max_position_embeddings": 131072,
        "dtype": "bfloat16",
        "tie_word_embeddings": False,
        "parameters": 8_030_261_248,
        "bos_token_id": 128000,
        "eos_token_id": 128009,
        "cite": "huggingface.co/meta-llama/Llama-3.1-8B-Instruct config.json",
    },
    # huggingface.co/meta-llama/Llama-3.3-70B-Instruct/blob/main/config.json (Llama-3 70B
    # dimensions: hidden 8192, intermediate 28672, 80 layers, 64 heads, 8 KV heads).
    "meta-llama/llama-3.3-70b-instruct": {
        "architecture": "LlamaForCausalLM",
        "model_type": "llama",
        "vocab_size": 128256,
        "hidden_size": 8192,
        "intermediate_size": 28672,
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "max_position_embeddings": 131072,
        "dtype": "bfloat16",
        "tie_word_embeddings": False,
        "parameters": 70_553_706_496,
        "bos_token_id": 128000,
        "eos_token_id": [128001, 128008, 128009],
        "cite": "huggingface.co/meta-llama/Llama-3.3-70B-Instruct config.json",
    },
    # huggingface.co/meta-llama/Llama-3.2-1B-Instruct config.json, read through a verbatim copy
    # (`_commit_hash` 4e20de362430cd3b72f300e6b0f18e50e7166e08) in public benchmark code.
    "meta-llama/llama-3.2-1b-instruct": {
        "architecture": "LlamaForCausalLM",
        "model_type": "llama",
        "vocab_size": 128256,
        "hidden_size": 2048,
        "intermediate_size": 8192,
        "num_hidden_layers": 16,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "max_position_embeddings": 131072,
        "dtype": "bfloat16",
        "tie_word_embeddings": True,
        "parameters": 1_235_814_400,
        "bos_token_id": 128000,
        "eos_token_id": 128001,
        "cite": "huggingface.co/meta-llama/Llama-3.2-1B-Instruct config.json @4e20de3",
    },
    # huggingface.co/Qwen/Qwen2.5-Coder-7B-Instruct config.json: Qwen2ForCausalLM, hidden 3584,
    # 28 layers, vocab 152064, max_position_embeddings 32768, bfloat16 (copy in public test code);
    # 28 heads / 4 KV heads / intermediate 18944 / untied are the Qwen2.5-7B dimensions.
    "qwen/qwen2.5-coder-7b-instruct": {
        "architecture": "Qwen2ForCausalLM",
        "model_type": "qwen2",
        "vocab_size": 152064,
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "head_dim": 128,
        "max_position_embeddings": 32768,
        "dtype": "bfloat16",
        "tie_word_embeddings": False,
        "attention_bias": True,
        "parameters": 7_615_616_512,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "cite": "huggingface.co/Qwen/Qwen2.5-Coder-7B-Instruct config.json",
    },
    # huggingface.co/lmsys/vicuna-7b-v1.3 config.json (LLaMA-1 7B: no num_key_value_heads,
    # i.e. MHA; vocab 32000; max_position_embeddings 2048; float16).
    "lmsys/vicuna-7b-v1.3": {
        "architecture": "LlamaForCausalLM",
        "model_type": "llama",
        "vocab_size": 32000,
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "head_dim": 128,
        "max_position_embeddings": 2048,
        "dtype": "float16",
        "tie_word_embeddings": False,
        "parameters": 6_738_415_616,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "cite": "huggingface.co/lmsys/vicuna-7b-v1.3 config.json",
    },
    # yuhuili/EAGLE3-LLaMA3.1-Instruct-8B (verified via SafeAILab/EAGLE @cb7e084
    # eagle/traineagle3/config.json and SpecForge llama3-8B-eagle3.json;
    # the hub file itself unverified): one decoder layer, draft vocab 32000, fp16.
    "yuhuili/eagle3-llama3.1-instruct-8b": {
        "architecture": "LlamaForCausalLM",
        "model_type": "llama",
        "vocab_size": 128256,
        "draft_vocab_size": 32000,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 1,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "max_position_embeddings": 2048,
        "dtype": "float16",
        "tie_word_embeddings": False,
        "head_kind": EAGLE3,
        "cite": "SafeAILab/EAGLE @cb7e084 eagle/traineagle3/config.json",
    },
    # yuhuili/EAGLE-Vicuna-7B-v1.3: the EAGLE-1 head that TRT-LLM examples/eagle/README.md pairs
    # with lmsys/vicuna-7b-v1.3; one LLaMA decoder layer at the base's width (hidden 4096,
    # intermediate 11008, 32 heads, vocab 32000). The head's own config.json is unverified.
    "yuhuili/eagle-vicuna-7b-v1.3": {
        "architecture": "LlamaForCausalLM",
        "model_type": "llama",
        "vocab_size": 32000,
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_hidden_layers": 1,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "head_dim": 128,
        "max_position_embeddings": 2048,
        "dtype": "float16",
        "tie_word_embeddings": False,
        "head_kind": EAGLE,
        "cite": "TRT-LLM examples/eagle/README.md pairing; EAGLE-1 head = 1 layer at base width (unverified)",
    },
    # huggingface.co/deepseek-ai/DeepSeek-V3 config.json: DeepseekV3ForCausalLM, 61 layers, hidden 7168,
    # dense intermediate 18432 (experts: moe_intermediate_size 2048, 256 routed + 1 shared, 8 per token),
    # MLA attention (128 heads, q_lora_rank 1536, kv_lora_rank 512, qk_nope 128 + qk_rope 64, v 128),
    # vocab 129280, 163840 positions, one MTP module (num_nextn_predict_layers 1, as layer 61); 671B
    # main + 14B MTP parameters (the model card). Shipped weights are FP8 block-quantized.
    "deepseek-ai/deepseek-v3": {
        "architecture": "DeepseekV3ForCausalLM",
        "model_type": "deepseek_v3",
        "vocab_size": 129280,
        "hidden_size": 7168,
        "intermediate_size": 18432,
        "moe_intermediate_size": 2048,
        "num_hidden_layers": 61,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "head_dim": 128,
        "max_position_embeddings": 163840,
        "dtype": "bfloat16",
        "tie_word_embeddings": False,
        # No "parameters": the dense-Llama formula (hub.estimate_parameters) does not count experts or MLA.
        "num_nextn_predict_layers": 1,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "cite": "huggingface.co/deepseek-ai/DeepSeek-V3 config.json and model card (671B + 14B MTP)",
    },
    # FasterDecoding/medusa-vicuna-7b-v1.3 config.json is only
    # {"base_model_name_or_path": "lmsys/vicuna-7b-v1.3", "medusa_num_heads": 2,
    #  "medusa_num_layers": 1} (copies in public code), while the checkpoint holds 4 heads
    # (TRT-LLM examples/medusa/README.md). Width and vocab are the base's.
    "fasterdecoding/medusa-vicuna-7b-v1.3": {
        "architecture": "MedusaModel",
        "model_type": MEDUSA_HEAD_MODEL_TYPE,
        "vocab_size": 32000,
        "hidden_size": 4096,
        "medusa_num_heads": 4,
        "medusa_num_layers": 1,
        "dtype": "float16",
        "head_kind": MEDUSA,
        "base_model_name_or_path": "lmsys/vicuna-7b-v1.3",
        "cite": "medusa-vicuna-7b-v1.3 config.json + TRT-LLM examples/medusa/README.md (4 heads)",
    },
}


def lookup(repo: str | None) -> dict[str, Any] | None:
    """The catalogue entry for a hub id (case-insensitive), or None."""
    if not repo:
        return None
    entry = _ENTRIES.get(repo.lower())
    return dict(entry) if entry is not None else None


def names() -> list[str]:
    return sorted(_ENTRIES)
