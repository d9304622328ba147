"""The engine backend (TensorRT-LLM ≤ 1.1): convert_checkpoint.py, then trtllm-build.

Commands follow NVIDIA/TensorRT-LLM `tensorrt_llm/commands/build.py` (1.x) and the upstream examples:
- converters: `examples/models/core/{llama,qwen}/convert_checkpoint.py` (`--model_dir --output_dir
  --dtype --tp_size --pp_size --workers`); `examples/medusa/convert_checkpoint.py` adds
  `--medusa_model_dir --num_medusa_heads --max_medusa_token_len` (and `--model_type` for qwen2/mixtral;
  NVIDIA/TensorRT-LLM examples/medusa/convert_checkpoint.py @b93e14c, dtype choices float32/bfloat16/
  float16); `examples/eagle/convert_checkpoint.py` adds `--eagle_model_dir --max_draft_len
  --num_eagle_layers --max_non_leaves_per_layer` (examples/eagle/README.md @585c756);
- `trtllm-build --checkpoint_dir --output_dir --gemm_plugin <dtype>` with the limits, and
  `--speculative_decoding_mode <mode> --max_draft_len N`; `--use_paged_context_fmha enable` for EAGLE
  and both draft-target engines (examples/draft_target_model/README.md); `--gather_generation_logits`
  on both draft-target engines when draft logits are used for acceptance.

Where the converter scripts live depends on the container: `$TRTLLM_EXAMPLES_DIR`, else the
container's facts (toolkit/data/containers/<yy.mm>.json: /app/examples in every
`tritonserver:<yy.mm>-trtllm-python-py3` from 25.06 on). The preflight checks that every script the plan
runs is there, and says where it looked.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from toolkit import modes
from toolkit.build.context import SPEC_MODE_NAMES, BuildContext
from toolkit.build.preflight import FAILED, PASSED, SKIPPED, CheckResult
from toolkit.build.steps import Step

# HF model_type → the converter (a key of the container facts' `converters`, a path under <examples>);
# Mixtral converts with the Llama script (examples/models/core/mixtral/README.md uses
# ../llama/convert_checkpoint.py).
CONVERTERS = {
    "llama": "llama",
    "mistral": "llama",
    "mixtral": "llama",
    "qwen2": "qwen",
}
# The converters heads convert with (ModeInfo.engine_converter): keys of the container facts' `converters`.
HEAD_CONVERTERS: tuple[str, ...] = tuple(m.engine_converter for m in modes.REGISTRY if m.engine_converter)
TRTLLM_BUILD = "trtllm-build"
_HINT_TOOLS = (
    "run inside the TensorRT-LLM container (nvcr.io/nvidia/tritonserver:<yy.mm>-trtllm-python-py3) "
    "and check $TRTLLM_EXAMPLES_DIR"
)


def family(ctx: BuildContext, role: str) -> str | None:
    return ctx.sources[role].facts.model_type


def roles(ctx: BuildContext) -> list[str]:
    return ["target"] + (["draft"] if modes.info(ctx.mode).two_model else [])


def _converter_key(ctx: BuildContext, role: str) -> str:
    converter = modes.info(ctx.mode).engine_converter
    if role == "target" and converter is not None:
        return converter
    return CONVERTERS.get(family(ctx, role) or "llama", CONVERTERS["llama"])


def _script(ctx: BuildContext, role: str) -> str:
    """The converter of one role, relative to the examples dir (from the container's facts)."""
    return ctx.container.converter(_converter_key(ctx, role))


def check_converter(ctx: BuildContext) -> list[CheckResult]:
    """One record per conversion the plan runs: the model family has a converter, and the script is
    there. A missing script fails, naming where it looked; in a dry run without --container-root it
    is only reported (the plan is written to run elsewhere)."""
    out = []
    ex = ctx.examples()
    strict = not ctx.dry_run or ctx.container.root is not None
    for role in roles(ctx):
        name = f"converter:{role}"
        fam = family(ctx, role)
        if fam is not None and fam not in CONVERTERS:
            out.append(
                CheckResult(
                    name,
                    FAILED,
                    f"no TensorRT-LLM converter known to sdtk for model_type '{fam}' ({ctx.sources[role].ref})",
                    "supported: " + ", ".join(sorted(CONVERTERS)) + "; or use backend llmapi/reference",
                )
            )
            continue
        rel = _script(ctx, role)
        script, host = ex.path / rel, ex.host / rel
        where = f"{host}" + (f" (in the container: {script})" if host != script else "")
        fam_text = fam or "model_type unknown, planning with the Llama converter"
        if host.is_file():
            out.append(CheckResult(name, PASSED, f"{fam_text} → {where} exists ({ex.why})"))
        elif strict:
            out.append(
                CheckResult(
                    name,
                    FAILED,
                    f"converter script for the {role} ({fam_text}) not found: looked for {where} ({ex.why})",
                    f"run inside the tritonserver:{ctx.container.container}-trtllm-python-py3 container, or set "
                    "$TRTLLM_EXAMPLES_DIR to the examples/ of the matching TensorRT-LLM checkout",
                )
            )
        else:
            out.append(
                CheckResult(
                    name,
                    SKIPPED,
                    f"skipped (dry run: {where} is not on this machine; the plan expects it there: {ex.why})",
                )
            )
    return out


def check_trtllm_build(ctx: BuildContext) -> CheckResult:
    """`trtllm-build` (a console script of the tensorrt_llm wheel) is on PATH; a dry run only reports."""
    found = shutil.which(TRTLLM_BUILD)
    if found:
        return CheckResult(f"tool:{TRTLLM_BUILD}", PASSED, f"{found} (on PATH)")
    searched = os.environ.get("PATH", "")
    if ctx.dry_run:
        return CheckResult(
            f"tool:{TRTLLM_BUILD}",
            SKIPPED,
            f"skipped (dry run: {TRTLLM_BUILD} is not on this machine's PATH; the tensorrt_llm wheel installs it)",
        )
    return CheckResult(
        f"tool:{TRTLLM_BUILD}",
        FAILED,
        f"{TRTLLM_BUILD} not found on PATH (searched: {searched})",
        _HINT_TOOLS,
    )


def parallel_of(ctx: BuildContext, role: str) -> tuple[int, int]:
    """(tp, pp) of one model: the draft may have its own tp (parallel.draft_tp)."""
    p = ctx.recipe.parallel
    if role == "draft":
        return (p.draft_tp or p.tp), p.draft_pp
    return p.tp, p.pp


def convert_argv(ctx: BuildContext, role: str, out: Path) -> list[str]:
    tp, pp = parallel_of(ctx, role)
    argv = ["python3", str(ctx.examples().path / _script(ctx, role)), "--model_dir", ctx.source_arg(role)]
    mode_args = modes.hooks(ctx.mode).engine_args(ctx.recipe.speculative, ctx, role)
    argv += mode_args.convert_sources
    argv += [
        "--output_dir", str(out),
        "--dtype", ctx.dtype,
        "--tp_size", str(tp),
        "--pp_size", str(pp),
        "--workers", str(tp * pp),
    ]  # fmt: skip
    return argv + list(mode_args.convert)


def build_argv(ctx: BuildContext, role: str, ckpt: Path, out: Path) -> list[str]:
    lim = ctx.recipe.build
    argv = [
        TRTLLM_BUILD,
        "--checkpoint_dir", str(ckpt),
        "--output_dir", str(out),
        "--gemm_plugin", ctx.dtype,
        "--max_batch_size", str(lim.max_batch_size),
        "--max_input_len", str(lim.max_input_len),
        "--max_seq_len", str(lim.max_seq_len),
        "--max_num_tokens", str(lim.max_num_tokens),
    ]  # fmt: skip
    mode = ctx.mode
    spec_name = SPEC_MODE_NAMES[mode]
    if role == "target" and spec_name is not None:
        argv += [
            "--speculative_decoding_mode",
            spec_name,
            "--max_draft_len",
            str(ctx.recipe.speculative.draft_len),
        ]
    argv += modes.info(mode).engine_build_args
    argv += modes.hooks(mode).engine_args(ctx.recipe.speculative, ctx, role).build
    tp, pp = parallel_of(ctx, role)
    argv += ["--workers", str(tp * pp)]
    return argv


def _inputs(ctx: BuildContext, role: str) -> list[Path]:
    """The checkpoint directories a conversion reads (their file identities go into the stamp)."""
    roles = [role]
    m = modes.info(ctx.mode)
    if role == "target" and m.source is not None and not m.two_model:  # heads converted with the target
        roles.append(m.source)
    return [p for p in (ctx.sources[r].path for r in roles) if p is not None]


def plan(ctx: BuildContext) -> list[Step]:
    steps: list[Step] = []
    for role in roles(ctx):
        ckpt = ctx.checkpoints / role
        eng = ctx.engines / role
        steps.append(
            Step(
                name=f"convert-{role}",
                title=f"convert the {role} checkpoint ({family(ctx, role) or 'llama'}, {ctx.dtype}, "
                f"tp={parallel_of(ctx, role)[0]} pp={parallel_of(ctx, role)[1]})",
                dest=ckpt,
                argv=convert_argv(ctx, role, ckpt),
                inputs=_inputs(ctx, role),
                hint=_HINT_TOOLS,
            )
        )
        mode = SPEC_MODE_NAMES[ctx.mode] if role == "target" else None
        steps.append(
            Step(
                name=f"build-{role}",
                title=f"build the {role} engine"
                + (f" ({mode}, max_draft_len {ctx.recipe.speculative.draft_len})" if mode else ""),
                dest=eng,
                argv=build_argv(ctx, role, ckpt, eng),
                after=[f"convert-{role}"],
                hint=_HINT_TOOLS,
            )
        )
    return steps
