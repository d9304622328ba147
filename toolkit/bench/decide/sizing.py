"""GPU sizing and the decode roofline: does a recipe fit, how many sequences, how fast at best.

- VRAM = weights (params × bytes of the dtype) + KV cache + the draft model or heads;
  KV bytes per token = 2 (K and V) × layers × kv_heads × head_dim × bytes.
- Max concurrent sequences at max_seq_len = KV budget ÷ (KV bytes per token × max_seq_len).
- Batch-1 decode roofline: a step reads the weights plus the sequence's KV once, so
  tok/s ≤ HBM bandwidth ÷ bytes read per step. Speculation commits τ tokens per step for
  about the same bytes (plus the draft's), hence ≤ τ × bandwidth ÷ bytes.
- At concurrency B a step is bounded by max(bytes/bandwidth, FLOPs/peak): the `Roofline`
  step cost feeds the cost model, which is why the predicted speedup falls as B grows.

All numbers are upper bounds from datasheets; real kernels reach a fraction of them
(`mbu`, `mfu` below are assumptions, printed with the result).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from toolkit.bench.proposers import ONE_PASS_MODES
from toolkit.errors import ModelError, UsageError, did_you_mean

if TYPE_CHECKING:
    from toolkit.recipe import Recipe

GB = 1e9  # datasheets give decimal GB and TB/s


@dataclass(frozen=True)
class GPU:
    key: str
    name: str
    memory_gb: float
    bandwidth_tbs: float  # HBM (GDDR for L40S) bandwidth, TB/s
    bf16_tflops: float  # dense (no sparsity) BF16/FP16 tensor-core peak
    source: str

    @property
    def memory_bytes(self) -> float:
        return self.memory_gb * GB

    @property
    def bandwidth(self) -> float:
        return self.bandwidth_tbs * 1e12

    @property
    def flops(self) -> float:
        return self.bf16_tflops * 1e12


GPUS: dict[str, GPU] = {
    # NVIDIA A100 Tensor Core GPU datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4): A100 80GB SXM,
    # HBM2e 2,039 GB/s, BF16 312 TFLOPS (624 with sparsity).
    "a100": GPU("a100", "A100 80GB SXM", 80, 2.039, 312, "NVIDIA A100 datasheet (80GB SXM)"),
    # NVIDIA H100 Tensor Core GPU datasheet: H100 SXM 80GB HBM3, 3.35 TB/s, BF16 1,979 TFLOPS with
    # sparsity → 989 dense.
    "h100": GPU("h100", "H100 SXM 80GB", 80, 3.35, 989, "NVIDIA H100 datasheet (SXM)"),
    # nvidia.com/en-us/data-center/h200: H200 SXM 141GB HBM3e, 4.8 TB/s, BF16 1,979 TFLOPS with
    # sparsity → 989 dense.
    "h200": GPU("h200", "H200 SXM 141GB", 141, 4.8, 989, "NVIDIA H200 product page (SXM)"),
    # nvidia.com/en-us/data-center/hgx (HGX B200, 8 GPUs): 1.44 TB HBM3e, 64 TB/s, FP16/BF16 36 PFLOPS
    # with sparsity; per GPU: 180 GB, 8 TB/s, 2.25 PFLOPS dense.
    "b200": GPU("b200", "B200 (HGX B200) 180GB", 180, 8.0, 2250, "NVIDIA HGX B200 spec ÷ 8 GPUs"),
    # NVIDIA L40S datasheet: 48 GB GDDR6, 864 GB/s, BF16 362.05 TFLOPS (733 with sparsity).
    "l40s": GPU("l40s", "L40S 48GB", 48, 0.864, 362.05, "NVIDIA L40S datasheet"),
}

DTYPE_BYTES = {"float32": 4.0, "float16": 2.0, "bfloat16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}
TP_SIZES = (1, 2, 4, 8)
# Assumptions, printed with every result: CUDA context + activations + runtime buffers per GPU,
# and the fraction of peak bandwidth / FLOPs that decode kernels reach.
RUNTIME_RESERVE_GB = 2.0
DEFAULT_CONTEXT = 1024  # tokens in a sequence's KV cache during decode (prompt + half the output, typically)
DEFAULT_MBU = 0.8
DEFAULT_MFU = 0.5


def get_gpu(key: str) -> GPU:
    k = key.lower().strip()
    if k not in GPUS:
        guess = did_you_mean(k, GPUS)
        raise UsageError(
            f"unknown GPU '{key}'" + (f"; did you mean '{guess}'?" if guess else ""),
            hint="choose one of " + ", ".join(GPUS),
        )
    return GPUS[k]


def dtype_bytes(dtype: str) -> float:
    if dtype not in DTYPE_BYTES:
        raise UsageError(f"unknown dtype '{dtype}'", hint="one of " + ", ".join(DTYPE_BYTES))
    return DTYPE_BYTES[dtype]


# --------------------------------------------------------------------------- model facts


@dataclass
class Component:
    """One model the deployment holds in GPU memory (target, draft or speculative head)."""

    role: str  # target | draft | eagle_head | medusa_heads
    ref: str
    params: int
    layers: int  # layers that keep a KV cache (0 for Medusa heads)
    kv_heads: int
    head_dim: int
    hidden: int
    facts_source: str  # "config.json (<path>)" | "catalogue (<cite>)"
    params_estimated: bool = False

    def weight_bytes(self, nbytes: float) -> float:
        return self.params * nbytes

    def kv_bytes_per_token(self, nbytes: float, tp: int = 1) -> float:
        """2 × layers × kv_heads × head_dim × bytes; KV heads split across TP ranks (at least 1 each)."""
        heads = math.ceil(self.kv_heads / tp) if self.kv_heads else 0
        return 2 * self.layers * heads * self.head_dim * nbytes

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def component_from_facts(role: str, ref: str, facts: Any) -> Component:
    """From toolkit.hub.ModelFacts (config.json or catalogue)."""
    if facts is None or not getattr(facts, "known", False):
        raise ModelError(
            f"no architecture facts for {role} '{ref}': not resolvable and not in the bundled catalogue",
            hint="download the checkpoint (or point the recipe at a local directory with config.json)",
        )
    params = facts.parameters
    if not params:
        raise ModelError(f"cannot tell the parameter count of {role} '{ref}' from its config")
    kind = facts.head_kind
    layers = 0 if kind in ONE_PASS_MODES else int(facts.num_hidden_layers or 0)  # MLP heads: no KV layers
    kv = int(facts.num_key_value_heads or facts.num_attention_heads or 0)
    hidden = int(facts.hidden_size or 0)
    heads = int(facts.num_attention_heads or 0)
    head_dim = int(facts.head_dim or (hidden // heads if heads else 0))
    src = f"config.json ({facts.cite})" if facts.source == "config.json" else f"catalogue ({facts.cite})"
    return Component(
        role, ref, int(params), layers, kv, head_dim, hidden, src, bool(facts.parameters_estimated)
    )


def recipe_dtype(recipe: Recipe, facts_dtype: str | None = None) -> str:
    """The recipe's dtype; `auto` means the checkpoint's own (bfloat16 when unknown)."""
    if recipe.dtype != "auto":
        return recipe.dtype
    return facts_dtype if facts_dtype in DTYPE_BYTES else "bfloat16"


# --------------------------------------------------------------------------- roofline step cost


@dataclass(frozen=True)
class Roofline:
    """Step time of a model on one GPU (its TP shard): memory time + compute time.

    memory: weights + KV of every sequence in the batch, read once per step;
    compute: 2 FLOPs per parameter per token, plus attention (4 × layers × q_dim × context).
    The two are added rather than overlapped (max): decode kernels at small and medium batch do
    not hide one behind the other, and the sum reproduces the gradual decline of published
    batch sweeps (EAGLE-3 Table 3: 1.81× at bs2 → 1.32–1.38× at bs32–64 on an H100), where a
    max() would predict a flat speedup and then a cliff.
    """

    weight_bytes: float
    kv_bytes_per_token: float
    params: float
    attn_flops_per_token: float  # per context token: 4 × layers × heads × head_dim
    context: int
    bandwidth: float
    flops: float
    mbu: float = DEFAULT_MBU
    mfu: float = DEFAULT_MFU

    def memory_time(self, batch: int) -> float:
        return (self.weight_bytes + batch * self.context * self.kv_bytes_per_token) / (
            self.bandwidth * self.mbu
        )

    def compute_time(self, batch: int, tokens: int) -> float:
        per_token = 2 * self.params + self.attn_flops_per_token * self.context
        return batch * tokens * per_token / (self.flops * self.mfu)

    def time(self, batch: int, tokens: int) -> float:
        return self.memory_time(batch) + self.compute_time(batch, tokens)


def roofline_for(
    comp: Component,
    gpu: GPU,
    nbytes: float,
    *,
    tp: int,
    context: int,
    heads: int | None = None,
    mbu: float = DEFAULT_MBU,
    mfu: float = DEFAULT_MFU,
) -> Roofline:
    q_dim = (heads or 0) * comp.head_dim if heads else comp.hidden
    return Roofline(
        weight_bytes=comp.weight_bytes(nbytes) / tp,
        kv_bytes_per_token=comp.kv_bytes_per_token(nbytes, tp),
        params=comp.params / tp,
        attn_flops_per_token=4 * comp.layers * q_dim / tp,
        context=context,
        bandwidth=gpu.bandwidth,
        flops=gpu.flops,
        mbu=mbu,
        mfu=mfu,
    )


# --------------------------------------------------------------------------- sizing


@dataclass
class TPFit:
    tp: int
    weights_gb_per_gpu: float
    kv_bytes_per_token_per_gpu: float
    kv_budget_gb_per_gpu: float
    max_sequences: int  # at max_seq_len
    fits: bool
    decode_tok_s_roofline: float  # batch 1, 100% of bandwidth (upper bound)
    decode_tok_s_spec_roofline: float | None  # × τ at the same bytes plus the draft's
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Sizing:
    gpu: GPU
    dtype: str
    bytes_per_param: float
    components: list[Component]
    weights_bytes: float
    kv_bytes_per_token: float
    max_seq_len: int
    context: int
    kv_fraction: float
    tau: float | None
    tau_source: str | None
    draft_forwards: int
    fits: list[TPFit] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)

    @property
    def min_tp(self) -> int | None:
        ok = [f.tp for f in self.fits if f.fits]
        return min(ok) if ok else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpu": asdict(self.gpu),
            "dtype": self.dtype,
            "bytes_per_param": self.bytes_per_param,
            "components": [c.to_dict() for c in self.components],
            "facts_sources": {c.role: c.facts_source for c in self.components},
            "weights_gb": self.weights_bytes / GB,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "max_seq_len": self.max_seq_len,
            "context": self.context,
            "kv_cache_free_gpu_mem_fraction": self.kv_fraction,
            "tau": self.tau,
            "tau_source": self.tau_source,
            "min_tp": self.min_tp,
            "per_tp": [f.to_dict() for f in self.fits],
            "assumptions": list(self.assumptions),
        }


@dataclass(frozen=True)
class SpeculativeStep:
    """One speculative step for the roofline: `tau` tokens per step (from the probe or an assumed
    α, `source` says which), and `draft_forwards`, how many times the draft/head weights are read
    per step (γ for a chain draft, 1 for Medusa, 0 for n-gram)."""

    tau: float | None = None
    source: str | None = None
    draft_forwards: int = 0


def size(
    components: list[Component],
    gpu: GPU | str,
    *,
    dtype: str = "bfloat16",
    max_seq_len: int = 8192,
    context: int | None = None,
    kv_fraction: float = 0.9,
    step: SpeculativeStep = SpeculativeStep(),
    tp_sizes: tuple[int, ...] = TP_SIZES,
) -> Sizing:
    """Memory fit and batch-1 roofline for each TP size (RUNTIME_RESERVE_GB per GPU reserved).

    `context`: tokens in the KV cache during decode for the roofline (default 1024, at most max_seq_len).
    `step`: the speculative step (SpeculativeStep; default none: no speculative roofline).
    """
    tau, tau_source, draft_forwards = step.tau, step.source, step.draft_forwards
    reserve_gb = RUNTIME_RESERVE_GB
    gpu = get_gpu(gpu) if isinstance(gpu, str) else gpu
    nbytes = dtype_bytes(dtype)
    if max_seq_len < 1:
        raise UsageError(f"max_seq_len must be ≥ 1, got {max_seq_len}")
    ctx = context if context is not None else min(DEFAULT_CONTEXT, max_seq_len)
    target = next(c for c in components if c.role == "target")
    extras = [c for c in components if c.role != "target"]
    weights = sum(c.weight_bytes(nbytes) for c in components)
    kv_tok = sum(c.kv_bytes_per_token(nbytes) for c in components)
    out = Sizing(
        gpu=gpu,
        dtype=dtype,
        bytes_per_param=nbytes,
        components=components,
        weights_bytes=weights,
        kv_bytes_per_token=kv_tok,
        max_seq_len=max_seq_len,
        context=ctx,
        kv_fraction=kv_fraction,
        tau=tau,
        tau_source=tau_source,
        draft_forwards=draft_forwards,
        assumptions=[
            f"{reserve_gb:g} GB per GPU reserved for CUDA context, activations and runtime buffers",
            f"KV cache gets kv_cache_free_gpu_mem_fraction={kv_fraction:g} of the memory left after weights",
            "weights and KV heads split evenly across TP ranks; no TP communication cost in the roofline",
            f"roofline decode at batch 1 reads all weights + {ctx} tokens of KV per step at 100% of "
            f"{gpu.bandwidth_tbs:g} TB/s (an upper bound; real kernels reach ~{DEFAULT_MBU:.0%})",
        ],
    )
    for tp in tp_sizes:
        w_gpu = weights / tp
        kv_gpu = sum(c.kv_bytes_per_token(nbytes, tp) for c in components)
        free = gpu.memory_bytes - w_gpu - reserve_gb * GB
        budget = max(0.0, free * kv_fraction)
        seqs = int(budget // (kv_gpu * max_seq_len)) if kv_gpu > 0 else 0
        fits = free > 0 and seqs >= 1
        t_bytes = target.weight_bytes(nbytes) / tp + target.kv_bytes_per_token(nbytes, tp) * ctx
        tok_s = gpu.bandwidth / t_bytes
        spec = None
        if tau is not None:
            d_bytes = sum(
                c.weight_bytes(nbytes) / tp + c.kv_bytes_per_token(nbytes, tp) * ctx for c in extras
            )
            spec = tau * gpu.bandwidth / (t_bytes + draft_forwards * d_bytes)
        note = ""
        if free <= 0:
            note = (
                f"weights need {w_gpu / GB:.1f} GB per GPU, more than {gpu.memory_gb:g} GB minus the reserve"
            )
        elif seqs < 1:
            note = f"no room for one {max_seq_len}-token sequence of KV cache"
        out.fits.append(TPFit(tp, w_gpu / GB, kv_gpu, budget / GB, seqs, fits, tok_s, spec, note))
    return out
