"""The values of a repository's RUNBOOK.md: launch, check, benchmark and roll-back commands."""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit import containers
from toolkit.containers import ngc_tritonserver
from toolkit.modes import LOOKAHEAD, info
from toolkit.server.plan import LaunchSite

if TYPE_CHECKING:
    from toolkit.recipe import Recipe
    from toolkit.repo.render import RenderResult

PROMPT = "Speculative decoding is"


def _connect_host(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "::", "[::]") else host


def _launch(recipe: Recipe, r: RenderResult) -> tuple[str, list[str]]:
    """The raw launch command (the render's launch plan at the recipe's host and ports), and
    notes on where it runs."""
    s = recipe.serving
    plan = r.launch
    site = LaunchSite(
        tritonserver=ngc_tritonserver(),
        model_repo=str(r.path),
        http_port=s.http_port,
        grpc_port=s.grpc_port,
        metrics_port=s.metrics_port,
        host=s.host,
        shm_prefix=None,
    )
    if r.backend == "reference":
        venv_bin = str(Path(sys.executable).parent)
        notes = [
            "Runs on CPU. Triton's Python backend must run a Python with sdtk (and torch) installed: put "
            f"`{venv_bin}` first in PATH. `sdtk deploy` does this, and lays out the CPU tritonserver embedded in "
            "nvidia-pytriton; by hand, use a tritonserver (≥ 2.51) whose Python backend stub matches that Python.",
        ]
        site = replace(site, tritonserver="tritonserver")
        return f"PATH={shlex.quote(venv_bin)}:$PATH " + plan.shell(site), notes
    if r.backend == "llmapi":
        notes = [
            "Run inside NVIDIA's `nvcr.io/nvidia/tritonserver:<yy.mm>-trtllm-python-py3` container (TensorRT-LLM "
            "≥ 1.0). The LLM API starts its own tensor-/pipeline-parallel workers, so one tritonserver process "
            "serves every GPU.",
        ]
        return plan.shell(site), notes
    notes = [
        "Run inside NVIDIA's `nvcr.io/nvidia/tritonserver:<yy.mm>-trtllm-python-py3` container whose TensorRT-LLM "
        "built the engines (the engine path ships through 1.2.x, deprecated on 1.2 by NVIDIA/TensorRT-LLM "
        "PR #11723, and not in the 1.3 line).",
    ]
    # upstream's launcher: --disable-auto-complete-config and a shm prefix per rank, prefix0_ first
    site = replace(site, shm_prefix="prefix", disable_auto_complete_config=True)
    if plan.mpirun:
        names = ",".join(r.tensorrt_llm_models)
        # /app/scripts in the container (toolkit/data/containers/: `COPY …/triton_backend/scripts scripts`)
        scripts = containers.layout(trtllm_version=recipe.trtllm_version).facts.scripts_dir.value
        upstream = (
            f"python3 {scripts}/launch_triton_server.py "
            f"{shlex.quote(f'--model_repo={r.path}')} "
            f"--world_size={plan.ranks} "
            f"{shlex.quote(f'--tensorrt_llm_model_name={names}')}"
            + (" --multi-model" if plan.multi_model else "")
        )
        notes.append(f"Upstream's launcher builds the same command: `{upstream}`.")
        if plan.multi_model:
            notes.append(
                "Draft-target runs two TensorRT-LLM models, so the executor uses orchestrator mode "
                "(TRTLLM_ORCHESTRATOR=1): one tritonserver process spawns the workers for every GPU. In containers "
                "newer than 24.06 add `--pinned-memory-pool-byte-size=0 --enable-peer-access=false` and "
                "`--cuda-memory-pool-byte-size=<gpu>:0` per GPU (launch_triton_server.py does)."
            )
    return plan.shell(site), notes


def _request(r: RenderResult, recipe: Recipe, *, stream: bool) -> dict[str, Any]:
    if r.entry_kind == "llmapi":
        body: dict[str, Any] = {
            "text_input": PROMPT,
            "sampling_param_max_tokens": 64,
            "sampling_param_return_perf_metrics": True,
        }
        if stream:
            body["streaming"] = True
        return body
    body = {"text_input": PROMPT, "max_tokens": 64, "return_perf_metrics": True}
    if r.entry_kind == "bls" and info(recipe.mode).two_model:  # the BLS loop's draft length γ
        body["num_draft_tokens"] = recipe.speculative.draft_len
    if stream:
        body["stream"] = True
    return body


def _curl(base: str, model: str, endpoint: str, body: dict[str, Any]) -> str:
    url = shlex.quote(f"{base}/v2/models/{model}/{endpoint}")
    return f"curl -s -X POST {url} -d {shlex.quote(json.dumps(body))}"


def _rollback(recipe: Recipe, r: RenderResult, base: str) -> list[str]:
    """Markdown paragraphs: how to switch speculation off, without a rebuild where possible."""
    mode, backend = recipe.mode, r.backend
    baseline = (
        "Or redeploy the baseline: a copy of the recipe with `speculative: {mode: none}` and without the "
        "draft or heads under `models` (`sdtk build`, then `sdtk deploy`)."
    )
    if mode == "none":
        return ["This deployment does not speculate: nothing to roll back."]
    if r.entry_kind == "llmapi":
        return [
            f"Delete the `speculative_config` block from `{r.entry_model}/1/model.yaml` and restart the server: "
            "the LLM API has no engine to rebuild.",
            baseline,
        ]
    if info(mode).two_model:
        body = {"text_input": PROMPT, "max_tokens": 64, "num_draft_tokens": 0}
        return [
            "Per request: send `num_draft_tokens` 0 to the BLS; it then calls tensorrt_llm alone, with no draft:",
            f"```bash\n{_curl(base, r.entry_model, 'generate', body)}\n```",
            f"For every request: set the `default_num_draft_tokens` parameter in `{r.entry_model}/config.pbtxt` "
            'to "0" and restart. The `ensemble` model of this repository never speculates (plain target).',
            baseline,
        ]
    paragraphs = []
    if mode == LOOKAHEAD:

        def tensor(name: str, data: list[int]) -> dict[str, Any]:
            return {"name": name, "shape": [1, len(data)], "datatype": "INT32", "data": data}

        body = {
            "inputs": [
                tensor("input_ids", [1, 2, 3]),
                tensor("input_lengths", [3]),
                tensor("request_output_len", [64]),
                tensor("lookahead_window_size", [1]),
                tensor("lookahead_ngram_size", [1]),
                tensor("lookahead_verification_set_size", [0]),
            ]
        }
        paragraphs += [
            "Per request: lookahead sizes (1, 1, 0) propose no draft tokens. They are inputs of `tensorrt_llm` "
            "only (the ensemble and the BLS do not carry them), so call it with token ids (replace 1, 2, 3 with the "
            "prompt's ids):",
            f"```bash\n{_curl(base, 'tensorrt_llm', 'infer', body)}\n```",
        ]
        if r.decoupled:
            paragraphs.append(
                "This deployment is decoupled, and HTTP `/infer` refuses decoupled models: send the same inputs "
                "over a gRPC stream (tritonclient `start_stream` / `async_stream_infer`)."
            )
    if backend == "reference":
        paragraphs.append(
            'For every request: set `decoding_mode` to "top_k_top_p" in `tensorrt_llm/config.pbtxt` and restart; '
            "the reference model then decodes plainly. No rebuild."
        )
    elif info(mode).heads_in_engine:
        paragraphs.append(
            f"The {mode} heads are compiled into the engine (the C++ backend takes the decoding mode from it), so "
            "speculation cannot be switched off in this repository."
        )
    paragraphs.append(baseline)
    return paragraphs


def runbook(recipe: Recipe, r: RenderResult) -> dict[str, Any]:
    """The context of RUNBOOK.md.j2."""
    from toolkit import __version__

    s = recipe.serving
    base = f"http://{_connect_host(s.host)}:{s.http_port}"
    recipe_ref = str(recipe.source_path) if recipe.source_path else recipe.display_name
    launch, notes = _launch(recipe, r)
    roles = {
        "preprocessing": "Python: text → token ids",
        "postprocessing": "Python: token ids → text",
        "tensorrt_llm": "the target LLM"
        + {"engine": " (C++ tensorrtllm backend)", "reference": " (Python: sdtk reference runtime)"}.get(
            r.backend, " (Python: NVIDIA's LLM-API model)"
        ),
        "tensorrt_llm_draft": "the draft LLM"
        + (" (C++ tensorrtllm backend)" if r.backend == "engine" else " (Python: sdtk reference runtime)"),
    }
    bls = r.entry_model if r.entry_kind == "bls" else "tensorrt_llm_bls"
    models = []
    for name in r.models:
        if r.entry_kind == "llmapi":
            role = (
                roles["tensorrt_llm"]
                if r.backend == "llmapi"
                else "Python: LLM-API contract, sdtk reference runtime"
            )
        elif name in roles:
            role = roles[name]
        elif name == bls:
            role = "Python BLS: preprocessing → LLM → postprocessing, and the draft-target loop"
        else:
            role = "ensemble: preprocessing → tensorrt_llm → postprocessing"
        models.append({"name": name, "role": role, "entry": name == r.entry_model})
    stream = (
        [_curl(base, r.entry_model, "generate_stream", _request(r, recipe, stream=True))]
        if r.decoupled
        else []
    )
    return {
        "version": __version__,
        "recipe": recipe.display_name,
        "recipe_ref": recipe_ref,
        "mode": r.mode,
        "backend": r.backend,
        "path": str(r.path),
        "entry": r.entry_model,
        "entry_kind": r.entry_kind,
        "decoupled": r.decoupled,
        "models": models,
        "warnings": r.warnings,
        "missing": r.missing,
        "launch": launch,
        "launch_notes": notes,
        "deploy": f"sdtk deploy {shlex.quote(recipe_ref)}",
        "render_only": f"sdtk deploy {shlex.quote(recipe_ref)} --render-only",
        "bench": f"sdtk bench {shlex.quote(recipe_ref)}",
        "validate": f"sdtk validate --model {shlex.quote(r.entry_model)} --recipe {shlex.quote(recipe_ref)}",
        "health": f"curl -sf {shlex.quote(base + '/v2/health/ready')} && echo ready",
        "model_ready": f"curl -sf {shlex.quote(f'{base}/v2/models/{r.entry_model}/ready')} "
        f"&& echo {shlex.quote(r.entry_model + ' ready')}",
        "generate": _curl(base, r.entry_model, "generate", _request(r, recipe, stream=False)),
        "generate_stream": stream,
        "metrics": f"curl -s {shlex.quote(f'http://{_connect_host(s.host)}:{s.metrics_port}/metrics')} "
        "| grep nv_inference_request",
        "llmapi_dest": shlex.quote(f"{r.path}/{r.entry_model}/1/"),
        "rollback": _rollback(recipe, r, base),
        "llmapi_source": "triton_backend/all_models/llmapi/tensorrt_llm/1",
    }
