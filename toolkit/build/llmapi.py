"""The llmapi backend (TensorRT-LLM ≥ 1.0, PyTorch): LLM-API options instead of engines.

Writes, into `engines/target/`:
- `extra_llm_api_options.yaml` for `trtllm-serve <model> --backend pytorch --extra_llm_api_options …`
  (and `trtllm-bench`), with `speculative_config`;
- `model.yaml` for Triton's `all_models/llmapi/tensorrt_llm/1/` (keys `model`, `backend: pytorch`,
  `tensor_parallel_size`, `pipeline_parallel_size`, `triton_config{max_batch_size: 0, decoupled}`, and
  the same LLM arguments; every key but triton_config goes to `LLM(**args)`:
  NVIDIA/TensorRT-LLM triton_backend/all_models/llmapi/tensorrt_llm/1/model.py @044a90d);
- `config.json` in the engine-directory layout of docs/contracts.md, with an `llmapi` section.

Field names by TensorRT-LLM version (see `schema_for`):

| version          | EAGLE-3 decoding_type | draft/head field        | hub id allowed | tree/layers fields |
|------------------|-----------------------|-------------------------|----------------|--------------------|
| 1.0.x            | Eagle (+eagle3_one_model) | speculative_model_dir | no (local dir) | no                 |
| 1.1.x            | Eagle (+eagle3_one_model) | speculative_model_dir | no (local dir) | yes                |
| ≥ 1.2 / unknown  | Eagle3 (+eagle3_one_model)| speculative_model     | yes            | yes                |

Evidence: 1.0/1.1-era `tensorrt_llm/llmapi/llm_args.py` `DecodingBaseConfig.from_dict` maps only
`Eagle` (plus MTP, Medusa, Lookahead, NGram, DraftTarget, …; "Eagle3" raises "Invalid decoding type")
and declares `speculative_model_dir`; the TRT-LLM 1.1.0rc0 gpt-oss guide (tech_blog11) and the
Llama-4 guide (tech_blog6) use `decoding_type: Eagle` + `speculative_model_dir`. NVIDIA/TensorRT-LLM
PR #10124 ("Eagle3 Specdec UX improvements", Dec 2025) introduced `decoding_type: Eagle3`
(`Eagle3DecodingConfig`, Literal["Eagle3"]; `Eagle` kept as an alias) and PR #10099 (Dec 2025)
renamed the field to `speculative_model` (alias `speculative_model_dir`, HF ids auto-downloaded);
both landed after the 1.1 branch, on the 1.2 line. `eagle3_layers_to_capture` and
`max_total_draft_tokens` appear in the 1.1-era EagleDecodingConfig, not in 1.0's.
NGram (`max_matching_ngram_size`, `is_keep_all`, `is_use_oldest`, `is_public_pool`; default
`max_matching_ngram_size` 0 in 1.0, 2 later, so sdtk always writes it) and DraftTarget keep their
names; `DraftTarget` is the documented YAML spelling in every version.
The docs run DraftTarget and NGram with `disable_overlap_scheduler: true`.

Load-aware speculation: `max_concurrency` and `draft_len_schedule` are `DecodingBaseConfig` fields of
the later llm_args.py: `max_concurrency` from PR #6676 (merged 2025-08, during the 1.1 release
candidates: rendered for 1.1 with a note that it is unverified there, refused for 1.0),
`draft_len_schedule` from PR #8194 (Oct 2025; PR #10860; PR #12262), after the 1.1 branch, so sdtk
refuses it for 1.0/1.1. From 1.2 on, what is written follows the declared line's stand-in
(toolkit/build/llmapi_schema.py): the recipe's schedule (sdtk's meaning, toolkit.modes.load_aware)
as a map keyed at the first and last batch size of each run of equal draft lengths, which 1.2
(keys are lower bounds) and 1.3 (upper bounds, PR #10860) read alike; `max_concurrency` folded into
it when both are set (1.3 makes them mutually exclusive); the acceptance cut-offs under the line's
names; `use_rejection_sampling` on 1.3 only; `eagle3_one_model` only where the line declares it.
`check_fields` runs the rendered speculative_config through the line's stand-in.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import asdict, dataclass
from typing import Any

import yaml
from packaging.version import Version

from toolkit import __version__, modes
from toolkit.build import llmapi_schema
from toolkit.build.configs import build_config, pretrained_config
from toolkit.build.context import SPEC_MODE_NAMES, BuildContext
from toolkit.build.preflight import FAILED, PASSED, CheckResult
from toolkit.build.steps import Step
from toolkit.modes import LlmapiCall
from toolkit.modes.load_aware import render_schedule
from toolkit.shellsafe import comment

EXTRA_OPTIONS = "extra_llm_api_options.yaml"
MODEL_YAML = "model.yaml"


@dataclass(frozen=True)
class LlmapiSchema:
    era: str
    eagle3_decoding_type: str
    model_key: str
    hub_ids: bool  # the speculative model may be a hub id (downloaded by TRT-LLM)
    tree_fields: bool  # eagle_choices / use_dynamic_tree / max_total_draft_tokens / eagle3_layers_to_capture
    why: str

    def to_dict(self) -> dict:
        return asdict(self)


def schema_for(version: str | None) -> LlmapiSchema:
    """The speculative_config field names TensorRT-LLM `version` accepts (None: the newest known)."""
    if version is None:
        return LlmapiSchema(
            "1.2+", "Eagle3", "speculative_model", True, True,
            "no TensorRT-LLM version installed or declared: newest field names (decoding_type Eagle3, "
            "speculative_model; set trtllm_version to pin)",
        )  # fmt: skip
    v = Version(version)
    if v < Version("1.1"):
        return LlmapiSchema(
            "1.0",
            "Eagle",
            "speculative_model_dir",
            False,
            False,
            f"TensorRT-LLM {version}: 1.0 field names (decoding_type Eagle, speculative_model_dir)",
        )
    if v < Version("1.2"):
        return LlmapiSchema(
            "1.1",
            "Eagle",
            "speculative_model_dir",
            False,
            True,
            f"TensorRT-LLM {version}: 1.0/1.1 field names (decoding_type Eagle, "
            "speculative_model_dir); Eagle3/speculative_model arrived in 1.2",
        )
    return LlmapiSchema(
        "1.2+",
        "Eagle3",
        "speculative_model",
        True,
        True,
        f"TensorRT-LLM {version}: decoding_type Eagle3, speculative_model",
    )


def schema(ctx: BuildContext) -> LlmapiSchema:
    return schema_for(ctx.version)


def _model_ref(ctx: BuildContext, role: str, *, local: bool) -> str:
    r = ctx.sources[role]
    if r.repo is None:  # a local path source
        return str(r.path) if r.path is not None else ctx.source_arg(role)
    if local or r.revision:
        return str(r.path) if r.path is not None else ctx.source_arg(role)
    return r.repo


def needs_local(ctx: BuildContext, role: str) -> bool:
    """Whether the speculative model must be a local directory for this version."""
    r = ctx.sources[role]
    return not schema(ctx).hub_ids or r.revision is not None


def _mode_config(ctx: BuildContext) -> dict | None:
    """The mode's speculative_config (its `llmapi_config` hook), with the decoding_type this
    version accepts: the first of `ModeInfo.llmapi_types`, or the version's EAGLE-3 spelling."""
    s = ctx.recipe.speculative
    m = modes.info(s.mode)
    if not m.llmapi_types:
        return modes.hooks(s.mode, backend="llmapi").llmapi_config(s, LlmapiCall("", "", None))
    sc = schema(ctx)
    decoding_type = (
        sc.eagle3_decoding_type if sc.eagle3_decoding_type in m.llmapi_types else m.llmapi_types[0]
    )
    model = None if m.source is None else _model_ref(ctx, m.source, local=needs_local(ctx, m.source))
    return modes.hooks(s.mode, backend="llmapi").llmapi_config(
        s, LlmapiCall(decoding_type, sc.model_key, model, ctx.version)
    )


def _load_aware(ctx: BuildContext, cfg: dict) -> None:
    """The recipe's load-aware knobs, in the version's field names (never max_concurrency together
    with draft_len_schedule: 1.3 refuses that, and 1.2.x may)."""
    s = ctx.recipe.speculative
    line = llmapi_schema.line(ctx.version)
    limit: int | None = getattr(s, "max_concurrency", None)
    schedule: dict[int, int] | None = getattr(s, "draft_len_schedule", None)
    if schedule is not None:
        cfg["draft_len_schedule"] = render_schedule(schedule, limit, ctx.recipe.build.max_batch_size)
    elif limit is not None:
        cfg["max_concurrency"] = limit
    if line is None:
        return
    window, threshold = line.cutoffs
    knobs = {
        window: getattr(s, "acceptance_window", None),
        threshold: getattr(s, threshold, None),
        "use_rejection_sampling": getattr(s, "use_rejection_sampling", None) if line.name != "1.2" else None,
    }
    cfg.update({k: v for k, v in knobs.items() if v is not None})


def speculative_config(ctx: BuildContext) -> dict | None:
    """The mode's speculative_config plus the recipe's load-aware knobs, for the version's schema."""
    cfg = _mode_config(ctx)
    if cfg is None:
        return None
    line = llmapi_schema.line(ctx.version)
    if line is not None and not line.eagle3_one_model and cfg.get("decoding_type") in ("Eagle3", "Eagle"):
        # 1.3: the two-model EAGLE-3 path is gone (PRs #17366, #18721) and Eagle3DecodingConfig has
        # no eagle3_one_model field (1.3.0rc27 API page); one-model is what runs.
        cfg.pop("eagle3_one_model", None)
    _load_aware(ctx, cfg)
    return cfg


def _version_refusals(ctx: BuildContext) -> list[str]:
    """Recipe knobs the declared version has no field for, each with what to do instead."""
    s = ctx.recipe.speculative
    line = llmapi_schema.line(ctx.version)
    name = line.name if line is not None else ctx.version
    out = []
    if line is None or line.name == "1.2":
        if getattr(s, "use_rejection_sampling", None) is not None:
            out.append(f"speculative.use_rejection_sampling: TensorRT-LLM {name} has no such field (1.3 has)")
        if getattr(s, "acceptance_rate_threshold", None) is not None:
            out.append(
                f"speculative.acceptance_rate_threshold: TensorRT-LLM {name} has no such field; "
                "did you mean acceptance_length_threshold (an average acceptance length, not a rate)?"
            )
    if (line is None or line.name != "1.2") and getattr(s, "acceptance_length_threshold", None) is not None:
        out.append(
            f"speculative.acceptance_length_threshold: TensorRT-LLM {name} has no such field; did you mean "
            "acceptance_rate_threshold (a rate in [0, 1], 1.3)?"
        )
    if (line is None or line.name == "1.2") and getattr(s, "sa_config", None) is not None:
        out.append(
            f"speculative.sa_config: TensorRT-LLM {name} has no SA enhancer (SAEnhancerConfig is in the 1.3 "
            "line); drop it, or declare trtllm_version 1.3.0"
        )
    if line is None and getattr(s, "acceptance_window", None) is not None:
        out.append(f"speculative.acceptance_window needs TensorRT-LLM >= 1.2 ({name} has no such field)")
    if (
        line is not None
        and not line.eagle3_one_model
        and "eagle3_one_model" in s.model_fields_set
        and getattr(s, "eagle3_one_model", True) is False
    ):
        out.append(
            f"speculative.eagle3_one_model: false: TensorRT-LLM {name} removed the two-model EAGLE-3 path "
            "(PRs #17366, #18721); drop the field (one-model runs)"
        )
    return out


def unverified(ctx: BuildContext) -> tuple[str, ...]:
    """What sdtk could not verify about the declared version's LLM-API facts."""
    line = llmapi_schema.line(ctx.version)
    return line.unverified if line is not None else ()


def check_fields(ctx: BuildContext) -> CheckResult:
    """The recipe's fields against the declared version, then the rendered speculative_config
    against that version's stand-in (toolkit.build.llmapi_schema)."""
    s = ctx.recipe.speculative
    sc = schema(ctx)
    used = [f for f in modes.info(s.mode).llmapi_fields_since_1_1 if getattr(s, f) not in (None, False)]
    load = [f for f in ("max_concurrency", "draft_len_schedule") if getattr(s, f, None) is not None]
    if sc.era == "1.1" and "max_concurrency" in load:
        # PR #6676 (merged 2025-08) added DecodingBaseConfig.max_concurrency on main during the 1.1
        # release candidates: render it, say so, let the user drop it if their 1.1 refuses it.
        load.remove("max_concurrency")
        ctx.notes.append(
            f"TensorRT-LLM {ctx.version}: speculative.max_concurrency is written as DecodingBaseConfig."
            "max_concurrency (added by NVIDIA/TensorRT-LLM PR #6676, merged 2025-08, during the 1.1 release "
            "candidates); unverified for 1.1: whether the release declares it (if LLM() refuses the field, "
            "drop it or plan for 1.2)"
        )
    if load and sc.era != "1.2+":
        since = "1.1 (max_concurrency) / 1.2" if sc.era == "1.0" else "1.2"
        return CheckResult(
            "llmapi-fields",
            FAILED,
            f"speculative.{', speculative.'.join(load)} need(s) TensorRT-LLM ≥ {since} (DecodingBaseConfig of "
            f"{ctx.version} has no such field)",
            "drop those fields, or plan for trtllm_version 1.2 or newer",
        )
    if used and not sc.tree_fields:
        return CheckResult(
            "llmapi-fields",
            FAILED,
            f"speculative.{', speculative.'.join(used)} need(s) TensorRT-LLM ≥ 1.1 (EagleDecodingConfig of "
            f"{ctx.version} has no such field)",
            "drop those fields, or plan for trtllm_version 1.1 or newer",
        )
    refused = _version_refusals(ctx)
    if refused:
        return CheckResult(
            "llmapi-fields", FAILED, "; ".join(refused), "drop them, or declare a version that has them"
        )
    return _check_standin(ctx, sc.why)


def _check_standin(ctx: BuildContext, why: str) -> CheckResult:
    line = llmapi_schema.line(ctx.version)
    spec = speculative_config(ctx)
    if line is None:
        return CheckResult("llmapi-fields", PASSED, why)
    if spec is not None:
        try:
            llmapi_schema.validate(ctx.version, spec)
        except llmapi_schema.StandinError as e:
            if getattr(ctx.recipe.speculative, "llmapi_check", "refuse") == "refuse":
                return CheckResult(
                    "llmapi-fields",
                    FAILED,
                    f"{e} ({line.source})",
                    "fix the recipe; if your TensorRT-LLM build accepts this, set speculative.llmapi_check: warn",
                )
            ctx.notes.append(
                f"speculative_config not accepted by the {line.name} stand-in (llmapi_check: warn): {e}"
            )
    ctx.notes.append(
        f"TensorRT-LLM {ctx.version or 'newest'}: LLM-API facts from {line.source}; unverified: "
        + "; ".join(line.unverified)
    )
    return CheckResult(
        "llmapi-fields", PASSED, f"{why}; speculative_config accepted by the {line.name} stand-in"
    )


def llm_args(ctx: BuildContext) -> dict:
    """LLM-API arguments shared by extra_llm_api_options.yaml and Triton's model.yaml."""
    r = ctx.recipe
    out: dict = {
        "tensor_parallel_size": r.parallel.tp,
        "pipeline_parallel_size": r.parallel.pp,
        "max_batch_size": r.build.max_batch_size,
        "max_num_tokens": r.build.max_num_tokens,
        "max_seq_len": r.build.max_seq_len,
    }
    if r.dtype != "auto":
        out["dtype"] = r.dtype
    target = ctx.sources["target"]
    if target.revision:
        out["revision"] = target.revision
    if "tokenizer" in ctx.sources:
        out["tokenizer"] = _model_ref(ctx, "tokenizer", local=False)
    out["kv_cache_config"] = {
        "free_gpu_memory_fraction": r.serving.kv_cache_free_gpu_mem_fraction,
        "enable_block_reuse": r.serving.enable_kv_cache_reuse,
    }
    out["cuda_graph_config"] = {"max_batch_size": r.build.max_batch_size}
    if modes.info(r.mode).llmapi_disable_overlap:
        out["disable_overlap_scheduler"] = True
    spec = speculative_config(ctx)
    if spec is not None:
        out["speculative_config"] = spec
    return out


def model_ref(ctx: BuildContext) -> str:
    return _model_ref(ctx, "target", local=False)


def model_yaml(ctx: BuildContext) -> dict:
    args = llm_args(ctx)
    head = {
        "model": model_ref(ctx),
        "backend": "pytorch",
        "tensor_parallel_size": args.pop("tensor_parallel_size"),
        "pipeline_parallel_size": args.pop("pipeline_parallel_size"),
        # Upstream model.yaml: `max_batch_size: 0 # The current implementation does not support
        # batching`; model.py rejects a batched text_input. The LLM batches in flight (max_batch_size
        # among the LLM arguments below).
        "triton_config": {"max_batch_size": 0, "decoupled": ctx.recipe.serving.decoupled},
    }
    return {**head, **args}


class _Dumper(yaml.SafeDumper):
    """Block style for mappings; lists of scalars (and trees: lists of such lists) on one line."""


def _represent_list(dumper: yaml.SafeDumper, data: list) -> yaml.Node:
    flat = all(not isinstance(x, (dict, list)) or (isinstance(x, list) and not any(
        isinstance(y, (dict, list)) for y in x)) for x in data)  # fmt: skip
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flat)


_Dumper.add_representer(list, _represent_list)


def _dump(header: list[str], data: dict) -> str:
    body = yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=4096)
    return "".join(f"# {comment(h)}\n" for h in header) + body


# trtllm-serve's options file flag. Every version sdtk plans for takes `--extra_llm_api_options`:
# 1.0/1.1 under that name; newer serve.py declares `@click.option("--config", "--extra_llm_api_options",
# "extra_llm_api_options", ...)`, i.e. the old name stays an alias of `--config`
# (NVIDIA/TensorRT-LLM tensorrt_llm/commands/serve.py @00209af).
SERVE_OPTIONS_FLAG = "--extra_llm_api_options"


def serve_flag(ctx: BuildContext) -> str:
    """`--config` where the version's docs prefer it (1.3 line), else `--extra_llm_api_options`."""
    line = llmapi_schema.line(ctx.version)
    return line.serve_flag if line is not None else SERVE_OPTIONS_FLAG


def serve_argv(ctx: BuildContext) -> list[str]:
    s = ctx.recipe.serving
    return [
        "trtllm-serve",
        model_ref(ctx),
        "--backend", "pytorch",
        serve_flag(ctx), str(ctx.engines / "target" / EXTRA_OPTIONS),
        "--host", s.host,
        "--port", str(s.http_port),
    ]  # fmt: skip


def files(ctx: BuildContext) -> dict[str, str]:
    sc = schema(ctx)
    version = ctx.version or "unknown"
    header = [
        f"written by sdtk {__version__} for recipe {ctx.name} ({ctx.mode}); TensorRT-LLM {version} "
        f"({ctx.version_source})",
        f"field names: {sc.why}",
    ]
    line = llmapi_schema.line(ctx.version)
    if line is not None:
        header.append(f"checked against sdtk's TensorRT-LLM {line.name} stand-in ({line.source})")
        header += [f"unverified for {line.name}: {u}" for u in line.unverified]
    extra = _dump([*header, "use: " + shlex.join(serve_argv(ctx))], llm_args(ctx))
    triton = _dump(
        [*header, "Triton llmapi model: all_models/llmapi/tensorrt_llm/1/model.yaml"], model_yaml(ctx)
    )
    cfg = {
        "version": version,
        "pretrained_config": pretrained_config(ctx, "target"),
        "build_config": build_config(ctx, "target"),
        "llmapi": {
            "schema": sc.to_dict(),
            "model": model_ref(ctx),
            "extra_llm_api_options": str(ctx.engines / "target" / EXTRA_OPTIONS),
            "model_yaml": str(ctx.engines / "target" / MODEL_YAML),
            "serve_command": serve_argv(ctx),
            "speculative_decoding_mode": SPEC_MODE_NAMES[ctx.mode],
        },
    }
    return {EXTRA_OPTIONS: extra, MODEL_YAML: triton, "config.json": json.dumps(cfg, indent=2) + "\n"}


def plan(ctx: BuildContext) -> list[Step]:
    inputs = [p for p in (r.path for r in ctx.sources.values()) if p is not None]
    return [
        Step(
            name="llmapi-target",
            title=f"write extra_llm_api_options.yaml and Triton model.yaml ({schema(ctx).era} field names)",
            dest=ctx.engines / "target",
            files=files(ctx),
            inputs=inputs,
        )
    ]


@dataclass
class _RecipeOnly:
    """What check_fields reads of a BuildContext, from the recipe alone (no source is resolved):
    the draft or head is named as the recipe names it."""

    recipe: Any
    version: str | None
    notes: list[str]

    @property
    def sources(self) -> dict[str, Any]:
        return {role: src for role, src in self.recipe.models if src is not None}

    def source_arg(self, role: str) -> str:
        src = self.sources[role]
        return str(src.path or src.repo)


def check_recipe(recipe: Any, version: str | None) -> list[str]:
    """`sdtk build`'s llmapi-fields check for a recipe whose build runs elsewhere (k8s, Slurm):
    the speculative_config the build will render for `version`, through the version's stand-in.
    Raises PreflightFailed on a refusal; returns the notes (what is unverified for the version)."""
    from toolkit.build.preflight import raise_failures

    shim = _RecipeOnly(recipe, version, [])
    result = check_fields(shim)  # type: ignore[arg-type]
    raise_failures([result])
    spec = speculative_config(shim)  # type: ignore[arg-type]
    if spec is not None and llmapi_schema.line(version) is not None:
        shim.notes.insert(
            0,
            f"speculative_config that sdtk build renders in the pod for TensorRT-LLM {version or 'newest'} "
            f"(accepted by sdtk's stand-in of its check): {json.dumps(spec, sort_keys=False)}",
        )
    return shim.notes
