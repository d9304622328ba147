"""`sdtk selftest`: the first thing to run on a GPU box (inside NVIDIA's tritonserver:<yy.mm>-trtllm-python-py3).

It writes tiny random-weight checkpoints locally (nothing is downloaded): a Llama-architecture
target of a few layers, a smaller Llama draft, Medusa heads (FasterDecoding layout) and an EAGLE-3
head with the upstream config keys (`LlamaForCausalLMEagle3`, `draft_vocab_size`,
`eagle_config.eagle_aux_hidden_state_layer_ids`), plus a byte-level BPE tokenizer trained on the
spot. Then, for every mode the installed TensorRT-LLM supports (the compat matrix: engine modes
below 1.2, llmapi modes from 1.0), it runs: build → deploy on the real Triton → validate (greedy
speculative output identical to target-only: the same backend's `none` deployment as the baseline)
→ a short bench → stop, and prints a pass/fail table with the failing step's log tail.

Without TensorRT-LLM it says so and runs the same flow on the reference backend (CPU), which is what
CI tests: the (mode, repository) pairs TensorRT-LLM 1.1 would run, with the engine path's modes on the
reference ensemble repository and the llmapi path's on the reference llmapi flavour (the same
config.pbtxt/model.yaml, backend label `reference-llmapi`). Random weights make acceptance low;
correctness (lossless greedy) is what is checked, on a target whose greedy choices rounding cannot
flip (MIN_MARGIN, checked before anything is deployed).

Checkpoint shapes fit TensorRT-LLM's kernels: every attention head is 64 wide (its decoder
attention kernels are instantiated for head sizes 32-256 only: NVIDIA/TensorRT-LLM
cpp/tensorrt_llm/kernels/decoderMaskedMultiheadAttention/instantiation/, no 16).
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import time
import traceback
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from toolkit import progress as prog
from toolkit.modes import DRAFT_TARGET, EAGLE3, LOOKAHEAD, LOOKAHEAD_FIELDS, MEDUSA, NGRAM, info

STEPS = ("build", "deploy", "validate", "bench", "stop")
# Layers the EAGLE-3 head captures: TensorRT-LLM's default {1, L//2-1, L-4} for L target layers.
TARGET_LAYERS = 8
WOULD_RUN = "1.1.0"  # the TensorRT-LLM of the newest verified NGC container (toolkit/ops/images.py)
HEAD_DIM = 64  # a head size every TensorRT-LLM attention kernel family supports (see the docstring)
CAPTURE = sorted({1, TARGET_LAYERS // 2 - 1, TARGET_LAYERS - 4})
CORPUS = [
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "Speculative decoding drafts tokens cheaply and verifies them with the target model in one pass.",
    "The quick brown fox jumps over the lazy dog. The quick brown fox jumps again.",
    "import os\nfor name in os.listdir('.'):\n    print(name)\n",
    "class Stack:\n    def __init__(self):\n        self.items = []\n",
] * 8
PROMPTS = ("def fibonacci(n):", "The quick brown fox", "import os\n")
VALIDATE_TOKENS = 16  # tokens per prompt the greedy-equality check compares
# Decisive greedy choices. Validation demands token-for-token equality between two deployments
# whose kernels differ (speculative verification runs other shapes than plain decoding), so every
# greedy choice of the target must survive fp16/bf16 rounding. Rounding is relative to the
# magnitudes involved (unit roundoff 2^-11 for fp16, 2^-8 for bf16, compounded over the layers),
# so the margin is measured relative to the step's largest |logit|: (top-1 - top-2) / max|logit|.
# Measured on the plain random checkpoints this replaced (all weights N(0, 0.02)): casting fp32 → bf16
# moved logits by up to ~1% of max|logit| (fp16: ~0.14%), while their smallest margin over these
# prompts was 0.02%-0.8% (seeds 0-4), and a cast changed a greedy token in 3 of 5 seeds (bf16) and
# in 1 of 5 (fp16).
# MIN_MARGIN is 10x that bf16 drift (~25x bf16's unit roundoff, ~200x fp16's).
MIN_MARGIN = 0.1
# The target's construction (make_checkpoints): token embeddings of norm ~sqrt(hidden), so each
# position's own embedding dominates the residual stream (every decoder layer still adds its random
# attention/MLP output, ~0.1 of it), and an lm_head whose row for token pi(x) holds the unit
# embedding of x (pi: seeded, onto the tokens that decode to printable ASCII), scaled so the top logit
# is ~PEAK_LOGIT. The greedy choice after x is then pi(x) with a margin of ~0.45-0.5 of the top
# logit (measured, seeds 0-4, in float32 and in bf16/fp16 casts), since random
# unit embeddings in 128 dimensions overlap by at most ~0.35. The price: the choice follows from the
# current token, so validation catches speculative-decoding errors (tokens wrongly accepted, dropped,
# repeated or misplaced) but not a target attention error that leaves every winner unchanged.
PEAK_LOGIT = 10.0
SPECIAL_TOKENS = 3  # <s>, </s>, <pad>: never a greedy choice


@dataclass
class ModeResult:
    mode: str
    backend: str
    steps: dict[str, str] = field(default_factory=dict)  # step → passed | failed | skipped
    failed_step: str | None = None
    error: str | None = None
    log_tail: str = ""
    seconds: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.failed_step is None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


@dataclass
class SelftestResult:
    trtllm_version: str | None
    backends: list[str]
    note: str
    checkpoints: dict[str, str]
    results: list[ModeResult]
    would_run: list[dict[str, str]]  # what a TensorRT-LLM install would run (documented in --json)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "trtllm_version": self.trtllm_version,
            "backends": self.backends,
            "note": self.note,
            "checkpoints": self.checkpoints,
            "results": [r.to_dict() for r in self.results],
            "would_run_with_trtllm": self.would_run,
        }

    def table(self) -> str:
        head = f"{'mode':<13} {'backend':<17} " + " ".join(f"{s:<9}" for s in STEPS) + " time"
        lines = [head, "-" * len(head)]
        for r in self.results:
            cells = " ".join(f"{r.steps.get(s, '-'):<9}" for s in STEPS)
            lines.append(f"{r.mode:<13} {r.backend:<17} {cells} {r.seconds:.0f}s")
        for r in self.results:
            if not r.ok:
                lines += ["", f"{r.mode} ({r.backend}) failed at {r.failed_step}: {r.error}"]
                if r.log_tail:
                    lines += ["  " + x for x in r.log_tail.splitlines()[-20:]]
        return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- checkpoints


def make_checkpoints(root: Path, seed: int = 0) -> dict[str, Path]:
    """Tiny random-weight checkpoints and a tokenizer under `root`; returns role → directory."""
    import torch
    from safetensors.torch import save_file
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(seed)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=["<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    vocab = len(fast)

    def llama(heads: int, kv: int, layers: int) -> LlamaConfig:
        hidden = heads * HEAD_DIM
        return LlamaConfig(
            vocab_size=vocab,
            hidden_size=hidden,
            intermediate_size=hidden * 3,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=kv,
            head_dim=HEAD_DIM,
            max_position_embeddings=512,
            bos_token_id=0,
            eos_token_id=1,
            pad_token_id=2,
            tie_word_embeddings=False,
            dtype="float16",
        )

    # Keyed (and named) by the recipe's model sources.
    paths = {role: root / role for role in ("target", "draft", "medusa_heads", "eagle_head")}
    for role, cfg in (("target", llama(2, 1, TARGET_LAYERS)), ("draft", llama(1, 1, 1))):
        model = LlamaForCausalLM(cfg)
        if role == "target":
            _make_decisive(model, fast)
        model.save_pretrained(paths[role])
        fast.save_pretrained(paths[role])

    # Medusa heads, FasterDecoding layout: {i}.0.linear = ResBlock, {i}.1 = Linear(hidden → vocab).
    hidden, heads = 2 * HEAD_DIM, 2  # the target's hidden size
    state = {}
    for i in range(heads):
        state[f"{i}.0.linear.weight"] = torch.randn(hidden, hidden) * 0.02
        state[f"{i}.0.linear.bias"] = torch.zeros(hidden)
        state[f"{i}.1.weight"] = torch.randn(vocab, hidden) * 0.02
    paths["medusa_heads"].mkdir(parents=True, exist_ok=True)
    save_file(state, str(paths["medusa_heads"] / "medusa_lm_head.safetensors"))
    save_file(state, str(paths["medusa_heads"] / "model.safetensors"))
    (paths["medusa_heads"] / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["MedusaModel"],
                "medusa_num_heads": heads,
                "medusa_num_layers": 1,
                "hidden_size": hidden,
                "vocab_size": vocab,
                "base_model_name_or_path": str(paths["target"]),
            },
            indent=2,
        )
    )

    # EAGLE-3 head: one decoder layer over concat(embedding, fused hidden), a reduced draft vocab + d2t.
    draft_vocab = vocab // 2
    inter, kv_dim = hidden * 3, HEAD_DIM  # 2 query heads, 1 KV head, as the target
    e3 = {
        "fc.weight": torch.randn(hidden, hidden * len(CAPTURE)) * 0.02,
        "midlayer.hidden_norm.weight": torch.ones(hidden),
        "midlayer.input_layernorm.weight": torch.ones(hidden),
        "midlayer.post_attention_layernorm.weight": torch.ones(hidden),
        "midlayer.self_attn.q_proj.weight": torch.randn(hidden, 2 * hidden) * 0.02,
        "midlayer.self_attn.k_proj.weight": torch.randn(kv_dim, 2 * hidden) * 0.02,
        "midlayer.self_attn.v_proj.weight": torch.randn(kv_dim, 2 * hidden) * 0.02,
        "midlayer.self_attn.o_proj.weight": torch.randn(hidden, hidden) * 0.02,
        "midlayer.mlp.gate_proj.weight": torch.randn(inter, hidden) * 0.02,
        "midlayer.mlp.up_proj.weight": torch.randn(inter, hidden) * 0.02,
        "midlayer.mlp.down_proj.weight": torch.randn(hidden, inter) * 0.02,
        "norm.weight": torch.ones(hidden),
        "lm_head.weight": torch.randn(draft_vocab, hidden) * 0.02,
        "d2t": torch.zeros(draft_vocab, dtype=torch.long),  # draft id i → target id i
    }
    paths["eagle_head"].mkdir(parents=True, exist_ok=True)
    save_file(e3, str(paths["eagle_head"] / "model.safetensors"))
    (paths["eagle_head"] / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLMEagle3"],
                "model_type": "llama",
                "bos_token_id": 0,
                "eos_token_id": 1,
                "pad_token_id": 2,
                "hidden_act": "silu",
                "hidden_size": hidden,
                "intermediate_size": inter,
                "max_position_embeddings": 512,
                "num_attention_heads": 2,
                "num_key_value_heads": 1,
                "head_dim": HEAD_DIM,
                "num_hidden_layers": 1,
                "rms_norm_eps": 1e-5,
                "tie_word_embeddings": False,
                "torch_dtype": "float16",
                "vocab_size": vocab,
                "draft_vocab_size": draft_vocab,
                "eagle_config": {"eagle_aux_hidden_state_layer_ids": CAPTURE, "use_aux_hidden_state": True},
            },
            indent=2,
        )
    )
    return paths


def _make_decisive(model: Any, tokenizer: Any) -> None:
    """Give a random Llama target decisive greedy choices (see MIN_MARGIN and PEAK_LOGIT).

    Successors are tokens that decode, alone, to printable ASCII: streamed chunks then decode to
    the same text as the whole output (a lone byte of a multi-byte character would not)."""
    import torch

    vocab = len(tokenizer)
    text = [tokenizer.decode([t]) for t in range(vocab)]
    printable = [
        t for t in range(SPECIAL_TOKENS, vocab) if text[t] and text[t].isascii() and text[t].isprintable()
    ]
    others = [t for t in range(SPECIAL_TOKENS, vocab) if t not in set(printable)]
    with torch.no_grad():
        embed = model.model.embed_tokens.weight
        hidden = embed.shape[1]
        embed.normal_(0.0, 1.0)  # norm ~sqrt(hidden): dominates the ~0.1-sized layer outputs
        unit = embed / embed.norm(dim=1, keepdim=True)
        head = torch.zeros(vocab, hidden)
        # a permutation of the printable tokens; every other token leads to a random printable one
        succ = dict(
            zip(printable, torch.tensor(printable)[torch.randperm(len(printable))].tolist(), strict=True)
        )
        succ |= dict(
            zip(
                others,
                torch.tensor(printable)[torch.randint(len(printable), (len(others),))].tolist(),
                strict=True,
            )
        )
        for token, nxt in succ.items():
            head[nxt] += unit[token]
        # the final RMSNorm leaves a hidden state of norm ~sqrt(hidden): row · h ≈ PEAK_LOGIT · cos
        head *= PEAK_LOGIT / hidden**0.5
        head[:SPECIAL_TOKENS] = torch.randn(SPECIAL_TOKENS, hidden) * 0.02  # never a greedy choice
        model.lm_head.weight.copy_(head)


@dataclass(frozen=True)
class Margins:
    """The smallest greedy top-1 margin (a fraction of the step's largest |logit|) over the
    selftest's prompts and token budget, and where it occurred."""

    min_margin: float
    prompt: str
    step: int
    tokens: dict[str, list[int]]  # prompt → greedy token ids


def greedy_margins(
    target: Path,
    *,
    dtype: str = "float32",
    prompts: Sequence[str] = PROMPTS,
    max_tokens: int = VALIDATE_TOKENS,
) -> Margins:
    """Greedy-decode each prompt on the target with transformers (in `dtype`: a cast of the stored
    weights, which simulates that precision's rounding), measuring each step's top-1 margin."""
    import torch
    from transformers import AutoTokenizer, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(target)
    model = LlamaForCausalLM.from_pretrained(target, dtype=torch.float32).to(getattr(torch, dtype)).eval()
    worst = (float("inf"), "", 0)
    tokens: dict[str, list[int]] = {}
    with torch.no_grad():
        for prompt in prompts:
            ids = tok(prompt, return_tensors="pt").input_ids
            out: list[int] = []
            for step in range(max_tokens):
                logits = model(ids).logits[0, -1].float()
                top = torch.topk(logits, 2)
                margin = float(top.values[0] - top.values[1]) / float(logits.abs().max())
                worst = min(worst, (margin, prompt, step))
                out.append(int(top.indices[0]))
                if out[-1] == tok.eos_token_id:
                    break
                ids = torch.cat([ids, top.indices[:1].view(1, 1)], dim=1)
            tokens[prompt] = out
    return Margins(worst[0], worst[1], worst[2], tokens)


def check_margins(target: Path) -> Margins:
    """The target's greedy margins in float32; TieProneCheckpoint below MIN_MARGIN."""
    from toolkit.errors import TieProneCheckpoint

    m = greedy_margins(target)
    if m.min_margin < MIN_MARGIN:
        raise TieProneCheckpoint(
            target,
            margin=m.min_margin,
            threshold=MIN_MARGIN,
            prompt=m.prompt,
            step=m.step,
            hint="write the checkpoints with toolkit.selftest.make_checkpoints, which builds a decisive target",
        )
    return m


# --------------------------------------------------------------------------- plan


def _spec(mode: str) -> dict[str, Any]:
    specs: dict[str, dict[str, Any]] = {
        "none": {"mode": "none"},
        DRAFT_TARGET: {"mode": DRAFT_TARGET, "max_draft_len": 4},
        MEDUSA: {"mode": MEDUSA, "num_medusa_heads": 2, "medusa_choices": [[0], [0, 0], [1], [0, 1]]},
        EAGLE3: {"mode": EAGLE3, "max_draft_len": 3, "layers_to_capture": CAPTURE},
        NGRAM: {"mode": NGRAM, "max_draft_len": 4, "max_matching_ngram_size": 3},
        LOOKAHEAD: {"mode": LOOKAHEAD, **dict(zip(LOOKAHEAD_FIELDS, (3, 3, 2), strict=True))},
    }
    return specs[mode]


REFERENCE_LLMAPI = "reference-llmapi"  # the reference backend serving the llmapi repository


def _reference(backend: str) -> bool:
    return backend in ("reference", REFERENCE_LLMAPI)


def selftest_recipe(mode: str, backend: str, paths: dict[str, Path], version: str | None) -> Any:
    """`backend`: engine | llmapi | reference | reference-llmapi (the reference backend behind the
    llmapi repository: serving.repository llmapi)."""
    from toolkit.recipe import parse_recipe

    models: dict[str, Any] = {"target": {"path": str(paths["target"])}}
    source = info(mode).source
    if source is not None:
        models[source] = {"path": str(paths[source])}
    spec = _spec(mode)
    if mode == EAGLE3 and backend == "llmapi" and version is not None:
        from toolkit.build.llmapi import schema_for

        if not schema_for(version).tree_fields:
            # 1.0's EagleDecodingConfig has no eagle3_layers_to_capture; CAPTURE is its default anyway
            spec.pop("layers_to_capture")
    data: dict[str, Any] = {
        "name": f"selftest-{backend}-{mode}".replace("_", "-"),
        "backend": "reference" if _reference(backend) else backend,
        "models": models,
        "speculative": spec,
        "dtype": "float32" if _reference(backend) else "float16",
        "build": {"max_batch_size": 2, "max_input_len": 128, "max_seq_len": 256, "max_num_tokens": 512},
        # Draft-target's BLS and both LLM models are non-decoupled on the GPU path, and so on its twin.
        "serving": {"decoupled": not (backend in ("engine", "reference") and mode == DRAFT_TARGET)},
    }
    if backend == REFERENCE_LLMAPI:
        data["serving"]["repository"] = "llmapi"
    if not _reference(backend):  # the baseline deployment runs alongside: leave GPU memory for both
        data["serving"]["kv_cache_free_gpu_mem_fraction"] = 0.2
    # The twin declares the version it stands in for, so that it serves that version's repository.
    data["trtllm_version"] = version if version is not None else WOULD_RUN
    return parse_recipe(data)


def plan_modes(version: str | None) -> list[tuple[str, str]]:
    """(mode, backend) pairs to test: what the installed TensorRT-LLM supports; without it, what
    TensorRT-LLM 1.1 would run, on the reference backend (the engine path's modes behind the
    ensemble repository, the llmapi path's behind the llmapi one)."""
    from packaging.version import Version

    from toolkit import compat

    if version is None:
        return [(m, "reference" if b == "engine" else REFERENCE_LLMAPI) for m, b in plan_modes(WOULD_RUN)]
    out: list[tuple[str, str]] = []
    v = Version(version)
    if v < Version("1.2"):  # the engine path (trtllm-build) exists up to 1.1
        out += [(m, "engine") for m in ("none", DRAFT_TARGET, MEDUSA, LOOKAHEAD)]
    if v >= Version("1.0"):
        out += [(m, "llmapi") for m in ("none", EAGLE3, NGRAM, DRAFT_TARGET)]
    return [(m, b) for m, b in out if not compat.problems(compat.cell(m, b), version, "llama")]


# --------------------------------------------------------------------------- run


def _tail(e: BaseException) -> str:
    tail = getattr(e, "log_tail", "") or ""
    log_path = getattr(e, "log_path", None)
    if not tail and log_path:
        with contextlib.suppress(OSError):
            tail = "\n".join(Path(log_path).read_text(errors="replace").splitlines()[-30:])
    return tail


def run_mode(
    mode: str,
    backend: str,
    paths: dict[str, Path],
    workdir: Path,
    *,
    version: str | None,
    baseline_url: str | None = None,
    bench_requests: int = 2,
    keep: bool = False,
    progress: prog.Step,
) -> tuple[ModeResult, Any]:
    """Build → deploy → validate → bench → stop one mode. Returns the result and, with `keep`, the
    running deployment (the baseline others validate against)."""
    from toolkit.build import build
    from toolkit.deploy import deploy
    from toolkit.server.state import stop_server
    from toolkit.validate import validate_deployment

    res = ModeResult(mode, backend)
    t0 = time.monotonic()
    recipe = selftest_recipe(mode, backend, paths, version)
    deployed = None
    step = "build"
    try:
        progress(f"{mode} ({backend}): build")
        build(recipe, workdir=workdir, progress=prog.quiet)
        res.steps["build"] = "passed"
        step = "deploy"
        progress(f"{mode} ({backend}): deploy")
        deployed = deploy(
            recipe, workdir=workdir, detach=True, auto_ports=True, validate=False, progress=prog.quiet
        )
        res.steps["deploy"] = "passed"
        res.details["ready_seconds"] = deployed.ready_seconds
        # A detached deploy returns only once the server is READY at these addresses.
        assert deployed.http_url is not None and deployed.grpc_url is not None
        step = "validate"
        progress(f"{mode} ({backend}): validate")
        report = validate_deployment(
            http_url=deployed.http_url,
            grpc_url=deployed.grpc_url,
            model=deployed.model,
            recipe=recipe,
            prompts=PROMPTS,
            max_tokens=VALIDATE_TOKENS,
            baseline_url=baseline_url,
            progress=None,
        )
        res.details["validation"] = report.to_dict()
        failed = [c for c in report.checks if c.status == "failed"]
        if failed:
            raise RuntimeError("; ".join(f"{c.name}: {c.detail}" for c in failed))
        correctness = next((c for c in report.checks if c.name == "correctness"), None)
        if correctness is None or correctness.status != "passed":
            raise RuntimeError(f"no correctness verdict (baseline: {report.baseline})")
        res.steps["validate"] = "passed"
        step = "bench"
        progress(f"{mode} ({backend}): bench")
        from toolkit.bench.api import bench

        # The deployment, not its URL: the llmapi model (and the C++ tensorrt_llm model up to
        # TensorRT-LLM 1.1) returns no token counts, so the recipe's tokenizer counts them.
        b = bench(
            deployed.workdir,
            model=deployed.model,
            concurrency=(1,),
            requests=bench_requests,
            warmup=0,
            max_tokens=8,
            report_dir=deployed.workdir / "reports" / "selftest",
            progress=False,
        )
        res.details["bench_report"] = str(b.report_dir)
        res.details["bench_token_counts"] = sorted(
            {str(r.token_count_source) for lv in b.levels for r in lv.records if r.ok}
        )
        res.steps["bench"] = "passed"
    except BaseException as e:  # noqa: BLE001 - every failure is one row of the table
        if isinstance(e, KeyboardInterrupt):
            if deployed is not None:
                stop_server(deployed.workdir)
            raise
        res.steps[step] = "failed"
        res.failed_step = step
        res.error = str(e) or type(e).__name__
        res.log_tail = _tail(e)
        if not res.log_tail and deployed is not None:
            log = deployed.workdir / "logs" / "tritonserver.log"
            with contextlib.suppress(OSError):
                res.log_tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        if not res.log_tail:
            res.log_tail = "".join(traceback.format_exception_only(type(e), e))
    finally:
        if deployed is not None and not (keep and res.ok):
            from toolkit.server.state import server_status

            stop_server(deployed.workdir)
            stopped = not server_status(deployed.workdir, timeout=1.0).running
            res.steps["stop"] = "passed" if stopped else "failed"
            if not stopped and res.failed_step is None:
                res.failed_step, res.error = "stop", f"the server in {deployed.workdir} still runs"
        for s in STEPS:
            res.steps.setdefault(s, "skipped")
        res.seconds = round(time.monotonic() - t0, 1)
    return res, (deployed if keep and res.ok else None)


def selftest(
    *,
    modes: Sequence[str] | None = None,
    workdir: Path | None = None,
    force_reference: bool = False,
    bench_requests: int = 2,
    progress: prog.Step | None = None,
) -> SelftestResult:
    """Run the self-test; see the module docstring. `modes` limits the modes (CI runs two)."""
    from toolkit.compat import installed_trtllm_version
    from toolkit.server.state import stop_server

    say = progress or prog.steps("selftest")
    version = None if force_reference else installed_trtllm_version()
    if version is None:
        note = (
            "TensorRT-LLM is not installed: running the same flow on the reference backend (CPU). "
            "Inside NVIDIA's tritonserver:<yy.mm>-trtllm-python-py3 container this runs the engine and "
            "llmapi backends instead (see would_run_with_trtllm)."
        )
    else:
        note = f"TensorRT-LLM {version}: testing every mode it supports"
    say(note)
    plan = plan_modes(version)
    if modes:
        unknown = sorted(set(modes) - {m for m, _ in plan})
        if unknown:
            from toolkit.errors import UsageError

            raise UsageError(
                f"mode(s) {', '.join(unknown)} not testable here",
                hint="choose from " + ", ".join(sorted({m for m, _ in plan})),
            )
        # engine/llmapi: the `none` deployment is the correctness baseline; the reference backend's
        # baseline is its in-process runtime
        plan = [(m, b) for m, b in plan if m in modes or (m == "none" and not _reference(b))]
    would_run = [{"mode": m, "backend": b} for m, b in plan_modes(WOULD_RUN)]
    with contextlib.ExitStack() as stack:
        root = workdir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sdtk-selftest-")))
        root = Path(root).resolve()
        say(f"writing random-weight checkpoints under {root / 'checkpoints'}")
        paths = make_checkpoints(root / "checkpoints")
        margins = check_margins(paths["target"])
        say(
            f"target's smallest greedy margin: {margins.min_margin:.2f} of max|logit| (at least {MIN_MARGIN})"
        )
        results: list[ModeResult] = []
        baselines: dict[str, Any] = {}
        try:
            # The same backend's plain deployment is the correctness baseline of its speculative modes.
            for mode, backend in sorted(plan, key=lambda p: p[0] != "none"):
                base = baselines.get(backend)
                needs_url = not _reference(backend) and mode != "none"
                res, kept = run_mode(
                    mode,
                    backend,
                    paths,
                    root / "work",
                    version=version,
                    baseline_url=base.http_url if (needs_url and base is not None) else None,
                    bench_requests=bench_requests,
                    keep=mode == "none" and not _reference(backend),
                    progress=say,
                )
                if kept is not None:
                    baselines[backend] = kept
                results.append(res)
                say(f"{mode} ({backend}): {'passed' if res.ok else 'FAILED at ' + str(res.failed_step)}")
        finally:
            for d in baselines.values():
                stop_server(d.workdir)
        return SelftestResult(
            trtllm_version=version,
            backends=sorted({b for _, b in plan}),
            note=note,
            checkpoints={k: str(v) for k, v in paths.items()},
            results=results,
            would_run=would_run,
        )
