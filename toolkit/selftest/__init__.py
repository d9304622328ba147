"""`sdtk selftest`: the first thing to run on a GPU box (inside NVIDIA's tritonserver:<yy.mm>-trtllm-python-py3).

It writes tiny random-weight checkpoints locally (nothing is downloaded): a Llama-architecture
target of a few layers, a smaller Llama draft, Medusa heads (FasterDecoding layout) and an EAGLE-3
head with the upstream config keys (`LlamaForCausalLMEagle3`, `draft_vocab_size`,
`eagle_config.eagle_aux_hidden_state_layer_ids`), plus a byte-level BPE tokenizer trained on the
spot. Then, for every mode the installed TensorRT-LLM supports (the compat matrix: engine modes
through 1.2.x, deprecated on 1.2 and gone in the 1.3 line; llmapi modes from 1.0), it runs: build →
deploy on the real Triton → validate (greedy speculative output identical to target-only: the same
backend's `none` deployment as the baseline) → a short bench → stop, and prints a pass/fail table
with the failing step's log tail.

Without TensorRT-LLM it says so and runs the same flow on the reference backend (CPU), which is what
CI tests: the (mode, repository) pairs TensorRT-LLM 1.2.1 (the newest verified container's) would run, with the engine path's modes on the
reference ensemble repository and the llmapi path's on the reference llmapi flavour (the same
config.pbtxt/model.yaml, backend label `reference-llmapi`). Random weights make acceptance low;
correctness (lossless greedy) is what is checked, on a target whose greedy choices rounding cannot
flip (MIN_MARGIN, checked before anything is deployed).

Checkpoint shapes fit TensorRT-LLM's kernels: every attention head is 64 wide (its decoder
attention kernels are instantiated for head sizes 32-256 only: NVIDIA/TensorRT-LLM
cpp/tensorrt_llm/kernels/decoderMaskedMultiheadAttention/instantiation/, no 16).
"""

from toolkit.selftest.checkpoints import (
    CAPTURE,
    MIN_MARGIN,
    PROMPTS,
    VALIDATE_TOKENS,
    Margins,
    check_margins,
    greedy_margins,
    make_checkpoints,
)
from toolkit.selftest.run import (
    REFERENCE_LLMAPI,
    STEPS,
    WOULD_RUN,
    ModeResult,
    SelftestResult,
    plan_modes,
    run_mode,
    selftest,
    selftest_recipe,
)

__all__ = [
    "CAPTURE",
    "MIN_MARGIN",
    "PROMPTS",
    "REFERENCE_LLMAPI",
    "STEPS",
    "VALIDATE_TOKENS",
    "WOULD_RUN",
    "Margins",
    "ModeResult",
    "SelftestResult",
    "check_margins",
    "greedy_margins",
    "make_checkpoints",
    "plan_modes",
    "run_mode",
    "selftest",
    "selftest_recipe",
]
