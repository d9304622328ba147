"""Rendering a Triton model repository from a recipe and its built engine directories.

    result = render_repository(recipe, {"target": engines / "target"}, out, backend="reference")

Every value comes from the recipe or from an engine directory's config.json (read the same way
for every backend); every parameter the recipe does not set is rendered as an explicit default
or as the empty string the C++ backend treats as unset, never as `${...}`. Nothing is written
until every config.pbtxt has parsed as a Triton ModelConfig, the models agree on their
transaction policy, and no template syntax is left; the repository is then written to
`<out>.incomplete` and moved into place, replacing a previous one only on success.

Layouts (docs in model_repo_templates/README.md):
- engine:    preprocessing, postprocessing, tensorrt_llm (C++ `tensorrtllm` backend),
             [tensorrt_llm_draft], tensorrt_llm_bls, ensemble
- reference: the same models and wiring; tensorrt_llm[_draft] are Python models that run
             toolkit.reference
- llmapi:    tensorrt_llm (Python, NVIDIA's model.py + our model.yaml)
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from toolkit import __version__, modes
from toolkit._fs import publish_dir
from toolkit.build.context import SPEC_MODE_NAMES
from toolkit.errors import CompatError
from toolkit.recipe import Recipe
from toolkit.repo.checks import check_configs, parse_configs, scan
from toolkit.repo.engines import TRITON_DTYPES, EngineInfo, read_engine
from toolkit.repo.errors import RenderError
from toolkit.repo.result import MANIFEST, RUNBOOK, RenderResult
from toolkit.repo.templates import RepoFile, environment, pybool, python_model, render_template
from toolkit.repo.versions import LLMAPI_MODEL_DIRS, llmapi_late_inputs
from toolkit.resources import templates_dir
from toolkit.server.plan import LaunchPlan, plan_launch

BACKENDS = ("engine", "llmapi", "reference")
TRTLLM_DIR_ENV = "TRTLLM_DIR"
LLMAPI_MODEL_SOURCE = "triton_backend/all_models/llmapi/tensorrt_llm/1"
REFERENCE_LLMAPI_MODEL = "reference_llmapi/tensorrt_llm/1/model.py"
# The Serving.model_name default: "the backend's natural entry point" (see entry_point).
DEFAULT_MODEL_NAME = "ensemble"
FIXED_MODELS = ("preprocessing", "postprocessing", "tensorrt_llm", "tensorrt_llm_draft")
# llmapi speculative_config decoding_type per mode; "Eagle" is the 1.0/1.1 spelling of EAGLE-3.
LLMAPI_DECODING_TYPES = modes.LLMAPI_DECODING_TYPES


# --------------------------------------------------------------------------- checks


def _check_engines(recipe: Recipe, backend: str, engines: dict[str, EngineInfo]) -> list[str]:
    """Cross-check the recipe against what was built. Returns warnings; raises RenderError."""
    warnings: list[str] = []
    spec = recipe.speculative
    target = engines["target"]
    built = target.speculative_decoding_mode
    want = SPEC_MODE_NAMES[recipe.mode]
    if "speculative_decoding_mode" in target.build and built != want:
        raise RenderError(
            f"the target engine was built with speculative_decoding_mode {built!r}, but the recipe's "
            f"speculative.mode {recipe.mode} needs {want!r}",
            file=target.config_path,
            hint="rebuild the engines for this recipe (`sdtk build`)",
        )
    if "draft" in engines and engines["draft"].speculative_decoding_mode is not None:
        raise RenderError(
            f"the draft engine was built with speculative_decoding_mode "
            f"{engines['draft'].speculative_decoding_mode!r}; a draft model decodes plainly",
            file=engines["draft"].config_path,
            hint="rebuild the draft engine without a speculative mode",
        )
    for found in modes.hooks(recipe.mode).serving_checks(spec, backend, target.max_draft_len):
        if not found.fatal:
            warnings.append(found.message)
            continue
        raise RenderError(
            found.message, file=target.config_path if found.on_engine else None, hint=found.hint or None
        )
    if backend != "llmapi" and recipe.build.max_batch_size != target.max_batch_size:
        warnings.append(
            f"build.max_batch_size is {recipe.build.max_batch_size} in the recipe but the target was built with "
            f"{target.max_batch_size}; the repository uses the built value"
        )
    if (
        backend == "engine"
        and modes.info(recipe.mode).two_model
        and recipe.serving.kv_cache_free_gpu_mem_fraction > 0.5
    ):
        warnings.append(
            f"serving.kv_cache_free_gpu_mem_fraction {recipe.serving.kv_cache_free_gpu_mem_fraction} applies to "
            "both tensorrt_llm and tensorrt_llm_draft on the same GPUs; the official draft-target recipe uses 0.5"
        )
    return warnings


def entry_point(recipe: Recipe, backend: str) -> tuple[str, str]:
    """(model name, kind) of the model clients call.

    The natural entry point is the ensemble, except for draft-target, whose loop lives in the
    BLS (the ensemble has no `num_draft_tokens`), and llmapi, whose only model is tensorrt_llm.
    `serving.model_name` renames that entry point; its default, "ensemble", keeps the natural name.
    """
    llmapi_layout = recipe.repository_layout(backend) == "llmapi"
    if llmapi_layout:
        natural, kind = "tensorrt_llm", "llmapi"
    elif modes.info(recipe.mode).two_model:
        natural, kind = "tensorrt_llm_bls", "bls"
    else:
        natural, kind = "ensemble", "ensemble"
    name = recipe.serving.model_name
    if name in (DEFAULT_MODEL_NAME, natural):
        return natural, kind
    taken = set(FIXED_MODELS) | {"tensorrt_llm_bls", "ensemble"}
    if llmapi_layout:
        taken = set()
    if name in taken:
        raise RenderError(
            f"serving.model_name '{name}' would rename the {kind} entry point to the name of another model "
            "in the repository",
            hint=f"choose another name, or leave serving.model_name at '{DEFAULT_MODEL_NAME}' ({natural})",
        )
    return name, kind


# --------------------------------------------------------------------------- values


def _tokenizer_dir(recipe: Recipe, target: EngineInfo, explicit: Path | str | None) -> tuple[str, list[str]]:
    """The tokenizer pre/postprocessing load: explicit > engine config > recipe source."""
    if explicit is not None:
        return str(Path(explicit).expanduser().absolute()), []
    ref = target.reference or {}
    if ref.get("tokenizer"):
        return str(ref["tokenizer"]), []
    source = recipe.models.tokenizer or recipe.models.target
    local = recipe.local_path(source)
    if local is not None:
        return str(local), []
    from toolkit.hub import resolve

    resolved = resolve(source, role="tokenizer", recipe=recipe, fetch="none")
    if resolved.path is not None:
        return str(resolved.path), []
    return str(source.repo), [
        f"tokenizer {source.describe()} is not in the local Hugging Face cache; pre/postprocessing will "
        "download it when they load (set HF_TOKEN for gated models)"
    ]


def _spec_params(recipe: Recipe, backend: str, role: str) -> dict[str, str]:
    """decoding_mode, choices and lookahead sizes of one LLM model."""
    out = {
        "decoding_mode": "top_k_top_p",
        "medusa_choices": "",
        "eagle_choices": "",
        "lookahead_window_size": "",
        "lookahead_ngram_size": "",
        "lookahead_verification_set_size": "",
    }
    spec = recipe.speculative
    if role == "draft" or recipe.mode == modes.NONE:
        return out
    # Two-model: the target verifies the BLS's draft_input_ids; the C++ backend takes the decoding
    # mode from the draft_tokens_external engine ("" here), and the reference model decodes plainly.
    out["decoding_mode"] = modes.info(recipe.mode).triton_decoding_mode(backend)
    out.update(modes.hooks(recipe.mode).triton_parameters(spec, backend, modes.LLM_MODEL))
    return out


def bls_instance_count(recipe: Recipe, engine_max_batch_size: int) -> int:
    """tensorrt_llm_bls instances: serving.bls_instance_count, else the engine's max batch size where
    the BLS is the entry model (draft-target), else 1.

    tensorrtllm_backend docs/model_config.md line 210 (r25.12, tensorrt_llm_bls): "When using the BLS
    model instead of the ensemble, you should set the number of model instances to the maximum batch
    size supported by the TRT engine to allow concurrent request execution." A non-decoupled BLS
    instance serves one request at a time, so fewer instances queue the rest; where the ensemble is
    the entry model, the BLS is a side door and max-batch-size instances would be idle stubs."""
    if recipe.serving.bls_instance_count:
        return recipe.serving.bls_instance_count
    return engine_max_batch_size if bls_is_entry(recipe) else 1


def bls_is_entry(recipe: Recipe) -> bool:
    """Whether the BLS is the model clients call (draft-target: its loop lives in the BLS)."""
    return modes.info(recipe.mode).two_model


def _gpu_device_ids(recipe: Recipe, role: str) -> str:
    """gpu_device_ids of one C++ model: filled per model for draft-target (upstream fills
    `gpu_device_ids:${TARGET_DEVICE_IDS}` / `${DRAFT_DEVICE_IDS}`, examples/draft_target_model/README.md
    @11925f6) or when the recipe names devices; otherwise empty (the backend's default). The
    reference twin renders the same value (its model ignores it)."""
    p = recipe.parallel
    if modes.info(recipe.mode).two_model or p.target_device_ids is not None:
        return ",".join(str(i) for i in p.devices(role))
    return ""


def _contract_names(recipe: Recipe, target: EngineInfo) -> dict[str, Any]:
    """Version-dependent tensor names of tensorrt_llm (toolkit/repo/versions.py), for the version the
    engine directory records (trtllm-build writes it) or else the recipe's `trtllm_version` (None:
    the newest contract). Every backend renders the same: the reference twin serves exactly the
    repository the engine path renders for that version, and its tensorrt_llm model reads whatever
    that config declares."""
    from toolkit.repo.versions import engine_version, tensor_names

    names = tensor_names(engine_version(target.config) or recipe.trtllm_version)
    return {
        "input_names": {"min_tokens": names.min_tokens, "seed": names.seed},
        "token_counts": names.token_counts,
    }


def _llm_context(
    recipe: Recipe, backend: str, engine: EngineInfo, name: str, tokenizer_dir: str, common: dict[str, Any]
) -> dict[str, Any]:
    s = recipe.serving
    return {
        **common,
        "model_name": name,
        "triton_backend": "tensorrtllm" if backend == "engine" else "python",
        "triton_max_batch_size": engine.max_batch_size,
        "instance_count": 1 if backend == "engine" else s.model_instance_count,
        "encoder_input_features_data_type": TRITON_DTYPES.get(engine.dtype, "TYPE_FP16"),
        # TYPE_FP16 like the ensemble's and the BLS's prompt_embedding_table, which feed this input.
        "prompt_embedding_table_data_type": "TYPE_FP16",
        "max_beam_width": str(engine.max_beam_width),
        "batching_strategy": s.batching_strategy,
        "engine_dir": str(engine.path),
        "encoder_engine_dir": "",
        "max_tokens_in_paged_kv_cache": "",
        "max_attention_window_size": "",
        "sink_token_length": "",
        "batch_scheduler_policy": s.batch_scheduler_policy,
        "kv_cache_free_gpu_mem_fraction": str(s.kv_cache_free_gpu_mem_fraction),
        "cross_kv_cache_fraction": "",
        "kv_cache_host_memory_bytes": "",
        "kv_cache_onboard_blocks": "",
        "enable_trt_overlap": "",
        "exclude_input_in_output": pybool(s.exclude_input_in_output),
        "cancellation_check_period_ms": "",
        "stats_check_period_ms": "",
        "iter_stats_max_iterations": "",
        "request_stats_max_iterations": "",
        # None only on a Serving built outside a Recipe: the recipe resolves the mode's default.
        "enable_kv_cache_reuse": pybool(bool(s.enable_kv_cache_reuse)),
        "normalize_log_probs": "" if s.normalize_log_probs is None else pybool(s.normalize_log_probs),
        "enable_chunked_context": pybool(s.enable_chunked_context),
        "gpu_device_ids": _gpu_device_ids(recipe, engine.role),
        "participant_ids": "",
        "num_nodes": "",
        "lora_cache_optimal_adapter_size": "",
        "lora_cache_max_adapter_size": "",
        "lora_cache_gpu_memory_fraction": "",
        "lora_cache_host_memory_bytes": "",
        "lora_prefetch_dir": "",
        **_spec_params(recipe, backend, engine.role),
        "gpu_weights_percent": "",
        "enable_context_fmha_fp32_acc": "",
        "multi_block_mode": "",
        "cuda_graph_mode": "",
        "cuda_graph_cache_size": "",
        "speculative_decoding_fast_logits": "",
        "tokenizer_dir": tokenizer_dir,
        "guided_decoding_backend": "",
        "xgrammar_tokenizer_info_path": "",
    }


def _llm_args(recipe: Recipe, target: EngineInfo, options: dict[str, Any] | None) -> dict[str, Any]:
    """The LLM() arguments of model.yaml: model, backend, parallelism, then the build's options."""
    llmapi = target.llmapi or {}
    source = recipe.models.target
    model = llmapi.get("model") or (str(recipe.local_path(source)) if source.path else source.repo)
    reserved = {"model", "backend", "triton_config"}
    options = dict(options or {})
    clash = sorted(reserved & set(options))
    if clash:
        raise RenderError(
            f"the llmapi options set {', '.join(clash)}, which model.yaml reserves",
            hint="remove them from extra_llm_api_options",
        )
    args: dict[str, Any] = {
        "model": model,
        "backend": "pytorch",
        "tensor_parallel_size": recipe.parallel.tp,
        "pipeline_parallel_size": recipe.parallel.pp,
    }
    if source.revision and "revision" not in options:
        args["revision"] = source.revision
    args.update(options)
    spec = args.get("speculative_config")
    if recipe.mode == "none":
        if spec:
            raise RenderError(
                "the llmapi options carry a speculative_config but the recipe's speculative.mode is none",
                hint="rebuild (`sdtk build`) so that the options match the recipe",
            )
    else:
        allowed = LLMAPI_DECODING_TYPES[recipe.mode]
        kind = spec.get("decoding_type") if isinstance(spec, dict) else None
        if kind not in allowed:
            raise RenderError(
                f"speculative.mode {recipe.mode} needs a speculative_config with decoding_type "
                f"{' or '.join(allowed)} in the llmapi options, found {kind!r}",
                hint="rebuild (`sdtk build`) so that extra_llm_api_options.yaml has the speculative_config",
            )
    return args


def _read_llmapi_options(target: EngineInfo) -> dict[str, Any] | None:
    """extra_llm_api_options.yaml named by the engine config's `llmapi` section, if any."""
    import yaml

    path = (target.llmapi or {}).get("extra_llm_api_options")
    if not path:
        return None
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RenderError(
            "the llmapi options file is missing", file=path, hint="rerun `sdtk build`"
        ) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise RenderError(
            f"invalid YAML: {getattr(e, 'problem', e)}", file=path, line=mark.line + 1 if mark else None
        ) from None
    if data is not None and not isinstance(data, dict):
        raise RenderError("the llmapi options are not a mapping", file=path)
    return data


# --------------------------------------------------------------------------- the plan


def _plan_inflight(
    recipe: Recipe,
    backend: str,
    engines: dict[str, EngineInfo],
    entry: str,
    tokenizer_dir: str,
    env,
    root: Path,
) -> tuple[list[RepoFile], list[str], list[str]]:
    """Files, empty version directories and LLM model names of an engine or reference repository."""
    s = recipe.serving
    target = engines["target"]
    draft_target = modes.info(recipe.mode).two_model
    ensemble = entry if not draft_target else "ensemble"
    bls = entry if draft_target else "tensorrt_llm_bls"
    common = {
        "recipe_name": recipe.display_name,
        "mode": recipe.mode,
        "backend": backend,
        "triton_max_batch_size": target.max_batch_size,
        "decoupled": s.decoupled,
        "max_queue_delay_microseconds": s.max_queue_delay_microseconds,
        "max_queue_size": s.max_queue_size,
        "logits_datatype": "TYPE_FP32",
        **_contract_names(recipe, target),
    }
    files: list[RepoFile] = []

    def render(template: str, rel: str, model: str, context: dict[str, Any]) -> None:
        files.append(
            RepoFile(rel, render_template(env, template, context, model=model, root=root), model, template)
        )

    base = "inflight_batcher_llm"
    render(
        f"{base}/preprocessing/config.pbtxt.j2",
        "preprocessing/config.pbtxt",
        "preprocessing",
        {
            **common,
            "tokenizer_dir": tokenizer_dir,
            "add_special_tokens": pybool(s.add_special_tokens),
            "multimodal_model_path": "",
            "engine_dir": str(target.path),
            "max_num_images": "",
            "hf_model_path": "",
            "preprocessing_instance_count": s.preprocessing_instance_count,
        },
    )
    python_model(root, files, "preprocessing", f"{base}/preprocessing/1/model.py")
    render(
        f"{base}/postprocessing/config.pbtxt.j2",
        "postprocessing/config.pbtxt",
        "postprocessing",
        {
            **common,
            "tokenizer_dir": tokenizer_dir,
            "skip_special_tokens": pybool(s.skip_special_tokens),
            "postprocessing_instance_count": s.postprocessing_instance_count,
        },
    )
    python_model(root, files, "postprocessing", f"{base}/postprocessing/1/model.py")

    llm_models = ["tensorrt_llm"] + (["tensorrt_llm_draft"] if draft_target else [])
    empty_dirs = []
    for name in llm_models:
        engine = engines["draft" if name == "tensorrt_llm_draft" else "target"]
        render(
            f"{base}/tensorrt_llm/config.pbtxt.j2",
            f"{name}/config.pbtxt",
            name,
            _llm_context(recipe, backend, engine, name, tokenizer_dir, common),
        )
        if backend == "reference":
            python_model(root, files, name, "reference/tensorrt_llm/1/model.py")
        else:
            empty_dirs.append(f"{name}/1")

    spec = recipe.speculative
    render(
        f"{base}/tensorrt_llm_bls/config.pbtxt.j2",
        f"{bls}/config.pbtxt",
        bls,
        {
            **common,
            "model_name": bls,
            "accumulate_tokens": "False",
            "tensorrt_llm_model_name": "tensorrt_llm",
            "tensorrt_llm_draft_model_name": "tensorrt_llm_draft" if draft_target else "",
            "multimodal_encoders_name": "",
            "default_num_draft_tokens": "0",
            "default_use_draft_logits": pybool(False),
            **modes.hooks(recipe.mode).triton_parameters(spec, backend, modes.BLS_MODEL),
            "exclude_input_in_output": pybool(s.exclude_input_in_output),
            "max_input_len": str(recipe.build.max_input_len),
            "max_seq_len": str(recipe.build.max_seq_len),
            "bls_instance_count": bls_instance_count(recipe, target.max_batch_size),
        },
    )
    python_model(root, files, bls, f"{base}/tensorrt_llm_bls/1/model.py")
    render(
        f"{base}/ensemble/config.pbtxt.j2",
        f"{ensemble}/config.pbtxt",
        ensemble,
        {**common, "model_name": ensemble},
    )
    empty_dirs.append(f"{ensemble}/1")
    return files, empty_dirs, llm_models


def _plan_llmapi(
    recipe: Recipe,
    target: EngineInfo,
    entry: str,
    options: dict[str, Any] | None,
    trtllm_dir: Path | None,
    env,
    root: Path,
    *,
    reference: bool = False,
) -> tuple[list[RepoFile], list[str], list[str]]:
    """Files, warnings and missing files of an llmapi repository. `reference`: the reference
    backend's flavour, the same config.pbtxt and model.yaml served by sdtk's reference llmapi model."""
    context = {
        "recipe_name": recipe.display_name,
        "mode": recipe.mode,
        "backend": "reference" if reference else "llmapi",
        "model_name": entry,
        "decoupled": recipe.serving.decoupled,
        "llm_args": _llm_args(recipe, target, options),
        "late_inputs": llmapi_late_inputs(recipe.trtllm_version),
    }
    files = [
        RepoFile(
            f"{entry}/config.pbtxt",
            render_template(env, "llmapi/tensorrt_llm/config.pbtxt.j2", context, model=entry, root=root),
            entry,
            "llmapi/tensorrt_llm/config.pbtxt.j2",
        ),
        RepoFile(
            f"{entry}/1/model.yaml",
            render_template(env, "llmapi/tensorrt_llm/1/model.yaml.j2", context, model=entry, root=root),
            entry,
            "llmapi/tensorrt_llm/1/model.yaml.j2",
        ),
    ]
    warnings: list[str] = []
    missing: list[str] = []
    if reference:
        python_model(root, files, entry, REFERENCE_LLMAPI_MODEL)
        return files, warnings, missing
    candidates = llmapi_model_dirs(trtllm_dir)
    source = next((c for c in candidates if (c / "model.py").is_file()), None)
    if source is not None:
        for py in sorted(source.glob("*.py")):
            files.append(
                RepoFile(f"{entry}/1/{py.name}", py.read_text(encoding="utf-8"), entry, str(py), scan=False)
            )
    else:
        missing.append(f"{entry}/1/model.py")
        looked = ", ".join(str(c) for c in candidates)
        warnings.append(
            f"{entry}/1/model.py (NVIDIA's LLM-API Triton model) is not in the repository: no model.py in {looked}. "
            f"Render inside the NGC tritonserver:<yy.mm>-trtllm-python-py3 container (it ships "
            f"{LLMAPI_MODEL_DIRS[0]}), or set {TRTLLM_DIR_ENV} to a TensorRT-LLM checkout (see RUNBOOK.md)"
        )
    return files, warnings, missing


def llmapi_model_dirs(trtllm_dir: Path | None) -> list[Path]:
    """Where NVIDIA's llmapi model.py is looked for, in order: $TRTLLM_DIR (or trtllm_dir), then the
    NGC container paths (toolkit/repo/versions.py LLMAPI_MODEL_DIRS)."""
    out = [trtllm_dir / LLMAPI_MODEL_SOURCE] if trtllm_dir is not None else []
    return out + [Path(d) for d in LLMAPI_MODEL_DIRS]


# --------------------------------------------------------------------------- writing


def _is_repository(path: Path) -> bool:
    return (path / MANIFEST).is_file()


def _write(out: Path, files: list[RepoFile], empty_dirs: list[str]) -> None:
    """Write into `<out>.incomplete`, then swap it in; a previous repository goes only on success."""
    tmp = out.with_name(out.name + ".incomplete")
    old = out.with_name(out.name + ".previous")
    for stale in (tmp, old):
        if stale.exists():
            shutil.rmtree(stale)
    try:
        tmp.mkdir(parents=True)
        for d in empty_dirs:
            (tmp / d).mkdir(parents=True, exist_ok=True)
        for f in files:
            path = tmp / f.rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f.text, encoding="utf-8")
        publish_dir(tmp, out, old=old)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


# --------------------------------------------------------------------------- entry point


def _check_pair(recipe: Recipe, backend: str, launch: LaunchPlan | None) -> None:
    """The (mode, backend) pair and serving options render refuses. With the deployment's launch
    plan, the support matrix was applied by the build that resolved its backend: not asked again."""
    if backend not in BACKENDS:
        raise RenderError(f"backend must be one of {', '.join(BACKENDS)}, not '{backend}'")
    if launch is None:
        from toolkit.compat import check

        check(recipe.mode, backend)  # CompatError for pairs the support matrix rules out
    elif launch.backend != backend:
        raise RenderError(f"the launch plan is for backend '{launch.backend}', not '{backend}'")
    if (
        recipe.repository_layout(backend) == "inflight_batcher_llm"
        and modes.info(recipe.mode).two_model
        and recipe.serving.decoupled
    ):
        # The reference twin refuses it too: it serves the repository a GPU user gets.
        raise CompatError(
            "the official draft-target deployment runs tensorrt_llm, tensorrt_llm_draft and the BLS "
            "non-decoupled (TensorRT-LLM examples/draft_target_model/README.md: decoupled_mode:False; the "
            "BLS calls both with exec(decoupled=False)), so serving.decoupled must be false",
            mode=recipe.mode,
            backend=backend,
            hint="set serving.decoupled: false (the draft-target BLS does not stream)",
        )


def _launch_plan(recipe: Recipe, backend: str, target: EngineInfo, launch: LaunchPlan | None) -> LaunchPlan:
    """The deployment's launch plan, planned once, for engines built for the recipe's world size;
    without one, the plan of the target engine as built."""
    if launch is None:
        return plan_launch(recipe, backend, engine_world_size=target.world_size)
    if target.world_size != recipe.parallel.world_size:
        raise RenderError(
            f"the target engine was built for world size {target.world_size}, but the recipe's "
            f"parallel.tp×pp is {recipe.parallel.world_size}",
            file=target.config_path,
            hint="rebuild the engines for this recipe (`sdtk build`)",
        )
    return launch


def render_repository(
    recipe: Recipe,
    engines: dict[str, Path | str],
    out_dir: Path | str,
    *,
    backend: str,
    llmapi_options: dict[str, Any] | None = None,
    tokenizer_dir: Path | str | None = None,
    trtllm_dir: Path | str | None = None,
    launch: LaunchPlan | None = None,
) -> RenderResult:
    """Render the Triton model repository of `recipe` into `out_dir` (atomically).

    engines: {"target": dir, "draft": dir} engine directories with config.json ("draft" only
      for draft-target on engine/reference).
    backend: "engine" | "llmapi" | "reference" (resolved, not "auto").
    llmapi_options: the build's extra_llm_api_options (speculative_config included); default:
      the file the target's config.json `llmapi` section names.
    tokenizer_dir: override the tokenizer pre/postprocessing load.
    trtllm_dir: a TensorRT-LLM checkout whose llmapi model.py to copy; default $TRTLLM_DIR.
    launch: the deployment's launch plan (toolkit.deploy.local.resolve: planned once, after the
      build resolved `backend` through the support matrix); render then checks no cell and plans
      no launch of its own. None: both here, the launch from the target engine's world size.
    """
    _check_pair(recipe, backend, launch)
    out = Path(out_dir).expanduser().absolute()
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not _is_repository(out))):
        raise RenderError(
            f"refusing to replace {out}: it exists and is not a repository sdtk rendered (no {MANIFEST})",
            hint="choose another output directory, or remove it yourself",
        )
    layout = recipe.repository_layout(backend)
    roles = ["target"] + (["draft"] if modes.info(recipe.mode).two_model and layout != "llmapi" else [])
    for role in roles:
        if role not in engines:
            raise RenderError(
                f"no {role} engine directory given", hint="run `sdtk build` for this recipe first"
            )
    info = {role: read_engine(engines[role], role) for role in roles}
    warnings = _check_engines(recipe, backend, info)
    entry, kind = entry_point(recipe, backend)
    root = templates_dir()
    env = environment(root)

    missing: list[str] = []
    if layout == "llmapi":
        if llmapi_options is None:
            llmapi_options = _read_llmapi_options(info["target"])
        trtllm = trtllm_dir if trtllm_dir is not None else os.environ.get(TRTLLM_DIR_ENV)
        files, more, missing = _plan_llmapi(
            recipe,
            info["target"],
            entry,
            llmapi_options,
            Path(trtllm).expanduser() if trtllm else None,
            env,
            root,
            reference=backend == "reference",
        )
        warnings += more
        empty_dirs: list[str] = []
        llm_models = [entry]
        bls = None
    else:
        tok, more = _tokenizer_dir(recipe, info["target"], tokenizer_dir)
        warnings += more
        files, empty_dirs, llm_models = _plan_inflight(recipe, backend, info, entry, tok, env, root)
        bls = entry if kind == "bls" else "tensorrt_llm_bls"

    configs = parse_configs(files)
    check_configs(configs, decoupled=recipe.serving.decoupled, llm_models=llm_models, bls=bls)
    result = RenderResult(
        path=out,
        backend=backend,
        mode=recipe.mode,
        entry_model=entry,
        entry_kind=kind,
        models=sorted(configs),
        decoupled=recipe.serving.decoupled,
        files=[],
        tensorrt_llm_models=llm_models,
        launch=_launch_plan(recipe, backend, info["target"], launch),
        warnings=warnings,
        missing=missing,
    )
    from toolkit.repo.runbook import runbook

    files.append(
        RepoFile(
            RUNBOOK,
            render_template(env, "RUNBOOK.md.j2", runbook(recipe, result), model=None, root=root),
            None,
            "RUNBOOK.md.j2",
        )
    )
    result.files = sorted([f.rel for f in files] + [MANIFEST])
    manifest = {"sdtk_version": __version__, "recipe": recipe.display_name, **result.to_dict()}
    manifest.pop("path")
    manifest["runbook"] = RUNBOOK
    files.append(RepoFile(MANIFEST, json.dumps(manifest, indent=2) + "\n", None, "toolkit/repo/render.py"))
    scan(files)
    _write(out, files, empty_dirs)
    return result
