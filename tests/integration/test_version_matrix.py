"""The version matrix: for every supported TensorRT-LLM version and every mode its GPU path has, the
reference twin serves that version's repository on the real embedded Triton, validates, and answers
NVIDIA's own clients' requests (tests/upstream_clients.py: end_to_end_grpc_client.py,
e2e_grpc_speculative_decoding_client.py, inflight_batcher_llm_client.py, tensorrtllm_backend v0.19.0).

Cells: the engine path's modes on the twin (none, draft-target, Medusa, lookahead; the twin has no
EAGLE-1/2) at 0.19, 0.20, 1.0, 1.1 and the newest contract; the llmapi path's (none, EAGLE-3, n-gram,
draft-target) at 1.0, 1.1, 1.2.1 and 1.3.0 (1.3: the llmapi late inputs, lora_* and image_url; the
EAGLE-3 cells of 1.2.1 and 1.3.0 with a draft-length schedule, rendered for both versions' reading
of its keys and read back by the twin). What a version changes is the rendered repository, so cells whose
repositories are identical (every config.pbtxt the same ModelConfig, every model file the same
bytes: e.g. 0.20, 1.0 and 1.1 share tensorrt_llm's contract) share one deployment, and the test
asserts that identity: one server per distinct repository, one at a time.

Per cell: `sdtk deploy` with validation (HTTP and gRPC generation, the correctness gate against the
target's own greedy output, acceptance, malformed requests, a short burst), then
- the ensemble, as end_to_end_grpc_client.py sends it (default, --exclude-input-in-output,
  --return-perf-metrics, and --streaming where that version's ensemble is decoupled);
- the BLS (tensorrt_llm_bls), the same way (streamed where it is decoupled);
- tensorrt_llm, as inflight_batcher_llm_client.py --streaming, where it is decoupled;
- draft-target: the e2e_grpc_speculative_decoding_client.py loop over ModelInfer on the draft and
  target models (its deployment keeps the prompt in output_ids, as that client needs);
- llmapi: one request through tensorrt_llm with the LLM-API model's inputs, streamed when decoupled.
"""

from __future__ import annotations

import contextlib
import hashlib
from pathlib import Path
from typing import Any

import httpx
import pytest
import upstream_clients as upstream
from triton_support import live_deployment, serving

from toolkit.recipe import load_recipe

pytestmark = [pytest.mark.tritonserver, pytest.mark.slow]

ENGINE_VERSIONS = ["0.19.0", "0.20.0", "1.0.0", "1.1.0", None]  # None: the newest contract
LLMAPI_VERSIONS = ["1.0.0", "1.1.0", "1.2.1", "1.3.0"]
ENGINE_MODES = {"none": "tiny-baseline", "draft_target": "tiny-draft-target", "medusa": "tiny-medusa",
                "lookahead": "tiny-lookahead"}  # fmt: skip
LLMAPI_MODES = {"none": "tiny-baseline", "eagle3": "tiny-eagle3-llmapi", "ngram": "tiny-ngram-llmapi",
                "draft_target": "tiny-draft-target"}  # fmt: skip
PROMPT = "def fibonacci(n):"
TOKENS = 12

# Mode outer, version inner: cells that share a repository come one after another.
CELLS = [("inflight_batcher_llm", m, v) for m in ENGINE_MODES for v in ENGINE_VERSIONS] + [
    ("llmapi", m, v) for m in LLMAPI_MODES for v in LLMAPI_VERSIONS
]


def _recipe(layout: str, mode: str, version: str | None) -> Any:
    base = (ENGINE_MODES if layout == "inflight_batcher_llm" else LLMAPI_MODES)[mode]
    overrides = [f"name=vm-{layout[:3]}-{mode.replace('_', '-')}"]
    if version:
        overrides.append(f"trtllm_version={version}")
    if layout == "llmapi":
        overrides += ["serving.repository=llmapi", "serving.decoupled=true"]
        if mode == "eagle3" and version in ("1.2.1", "1.3.0"):
            # sdtk's meaning: batch 1-2 -> 3, 3+ -> 1 (1.2 and 1.3 read a map's keys differently)
            overrides.append("speculative.draft_len_schedule=[{max_batch: 2, draft_len: 3}, {draft_len: 1}]")
    if mode == "draft_target" and layout != "llmapi":
        # e2e_grpc_speculative_decoding_client.py reads the prompt back from output_ids.
        overrides.append("serving.exclude_input_in_output=false")
    return load_recipe(base, overrides)


def _fingerprint(repo: Path) -> str:
    """The repository as Triton loads it: each config.pbtxt as a parsed ModelConfig with the
    deployment's own paths taken out, and every model file's bytes."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    h = hashlib.sha256()
    for path in sorted(repo.rglob("*")):
        rel = path.relative_to(repo).as_posix()
        if not path.is_file() or "/" not in rel or "__pycache__" in rel:  # documents, bytecode
            continue
        data = path.read_bytes()
        if path.name == "config.pbtxt":
            cfg = text_format.Parse(data.decode(), model_config_pb2.ModelConfig())
            for value in cfg.parameters.values():
                if value.string_value.startswith("/"):
                    value.string_value = Path(value.string_value).name
            data = text_format.MessageToString(cfg).encode()
        h.update(rel.encode() + b"\0" + data + b"\0")
    return h.hexdigest()


class Matrix:
    """One live deployment at a time, reused by the cells whose repository it serves."""

    def __init__(self, root: Path):
        self.root = root
        self.stack = contextlib.ExitStack()
        self.key: str | None = None
        self.result: Any = None
        self.served: dict[str, list[str]] = {}

    def shares(self, cell_id: str) -> str | None:
        """The cell already checked on the same repository (same deployment), if any."""
        cells = self.served.get(self.key or "", [])
        return cells[0] if cells and cells[0] != cell_id else None

    def deployment(self, cell_id: str, recipe: Any) -> Any:
        from toolkit.deploy import render
        from toolkit.progress import quiet

        _, rendered = render(recipe, backend=None, workdir=self.root / "render" / cell_id, progress=quiet)
        key = _fingerprint(rendered.path)
        if key != self.key:
            self.stack.close()
            self.stack = contextlib.ExitStack()
            self.key = None  # a failed deploy must not leave the stopped server's key behind
            self.result = self.stack.enter_context(
                live_deployment(recipe, self.root / "serve" / cell_id, validate=True)
            )
            self.key = key
            # The deployed repository is the one just rendered for this cell.
            assert _fingerprint(self.result.model_repo) == key
        self.served.setdefault(key, []).append(cell_id)
        return self.result

    def close(self) -> None:
        self.stack.close()


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    m = Matrix(tmp_path_factory.mktemp("matrix"))
    try:
        yield m
    finally:
        m.close()


def _config(result: Any, model: str) -> dict[str, Any]:
    r = httpx.get(f"{result.http_url}/v2/models/{model}/config", timeout=10)
    r.raise_for_status()
    return r.json()


def _decoupled(result: Any, model: str) -> bool:
    return bool((_config(result, model).get("model_transaction_policy") or {}).get("decoupled"))


def _grpc(result: Any) -> str:
    return result.grpc_url.removeprefix("grpc://")


def _check_inflight(result: Any, mode: str, version: str | None) -> None:
    grpc = _grpc(result)
    models = ["ensemble", "tensorrt_llm_bls"]
    for model in models:
        text, _ = upstream.end_to_end(grpc, model, PROMPT, output_len=TOKENS)
        assert text.startswith(PROMPT) and len(text) > len(PROMPT), (model, text)
        alone, _ = upstream.end_to_end(grpc, model, PROMPT, output_len=TOKENS, exclude_input_in_output=True)
        assert alone and not alone.startswith(PROMPT), (model, alone)
        _, perf = upstream.end_to_end(grpc, model, PROMPT, output_len=TOKENS, perf=True)
        assert (
            perf["kv_cache_alloc_total_blocks"] >= 1 and perf["last_token_time_ns"] >= perf["arrival_time_ns"]
        )
        if mode == "draft_target" and model == "tensorrt_llm_bls":
            assert perf["total_draft_tokens"] > 0  # the BLS loop speculated
        if _decoupled(result, model):
            streamed, _ = upstream.end_to_end(grpc, model, PROMPT, output_len=TOKENS, streaming=True)
            assert streamed, model
    # text_output is [beams] per request, as upstream's postprocessing makes it (KServe /infer).
    r = httpx.post(
        f"{result.http_url}/v2/models/ensemble/infer",
        json={
            "inputs": [
                {"name": "text_input", "shape": [1, 1], "datatype": "BYTES", "data": [PROMPT]},
                {"name": "max_tokens", "shape": [1, 1], "datatype": "INT32", "data": [4]},
            ]
        },
        timeout=60,
    )
    if not _decoupled(result, "ensemble"):  # /infer takes only models that are not decoupled
        assert r.status_code == 200, r.text
        (out,) = [o for o in r.json()["outputs"] if o["name"] == "text_output"]
        assert out["shape"] == [1], out
    llm = _config(result, "tensorrt_llm")
    names = {i["name"] for i in llm["input"]}
    outputs = {o["name"] for o in llm["output"]}
    assert ("min_length" in names) == (version == "0.19.0") and ("random_seed" in names) == (
        version == "0.19.0"
    )
    assert ("num_output_tokens" in outputs) == (version is None)  # declared from TensorRT-LLM 1.2 only
    if mode == "draft_target":
        assert not _decoupled(result, "tensorrt_llm_bls")  # as upstream's draft-target deployment
        text = upstream.speculative(grpc, PROMPT, output_len=TOKENS, num_draft_tokens=2)
        assert text.startswith(PROMPT) and len(text) > len(PROMPT)
    if _decoupled(result, "tensorrt_llm"):
        tok = _tokenizer(result)
        ids = tok.encode(PROMPT)
        tokens = upstream.inflight_streaming(grpc, ids, end_id=tok.eos_token_id, pad_id=tok.eos_token_id,
                                             output_len=TOKENS)  # fmt: skip
        assert 0 < len(tokens) <= TOKENS


def _model_yaml(result: Any) -> dict[str, Any]:
    import yaml

    return yaml.safe_load((Path(result.model_repo) / result.model / "1" / "model.yaml").read_text())


def _tokenizer(result: Any) -> Any:
    from transformers import AutoTokenizer

    params = _config(result, "preprocessing")["parameters"]
    return AutoTokenizer.from_pretrained(params["tokenizer_dir"]["string_value"])


def _check_llmapi(result: Any, mode: str, version: str | None) -> None:
    from toolkit.build.llmapi_schema import read_lower_bounds, read_upper_bounds
    from toolkit.client import TritonClient
    from toolkit.repo.versions import LLMAPI_LATE_INPUTS

    model = result.model
    names = {i["name"] for i in _config(result, model)["input"]}
    late = set(LLMAPI_LATE_INPUTS)
    assert (late <= names) if version == "1.3.0" else not (late & names), sorted(names)
    spec = _model_yaml(result).get("speculative_config") or {}
    if mode == "eagle3" and version in ("1.2.1", "1.3.0"):
        sched = spec["draft_len_schedule"]
        assert "max_concurrency" not in spec
        assert ("eagle3_one_model" in spec) == (version == "1.2.1")
        top = _model_yaml(result)["max_batch_size"]
        for read in (read_lower_bounds, read_upper_bounds):
            assert [read(sched, b) for b in range(1, top + 1)] == [3, 3] + [1] * (top - 2), sched
    body = {"text_input": PROMPT, "sampling_param_max_tokens": TOKENS}  # upstream docs/llmapi.md's request
    r = httpx.post(f"{result.http_url}/v2/models/{model}/generate", json=body, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["text_output"]
    assert _decoupled(result, model)
    with TritonClient(result.http_url, model=model) as client, client.stream(PROMPT, max_tokens=TOKENS) as s:
        text = "".join(chunk.text for chunk in s)
    assert text and s.response.num_chunks > 1


@pytest.mark.parametrize(
    ("layout", "mode", "version"), CELLS, ids=[f"{lay[:3]}-{m}-{v or 'newest'}" for lay, m, v in CELLS]
)
def test_cell(matrix, layout, mode, version, request):
    cell = request.node.callspec.id
    result = matrix.deployment(cell, _recipe(layout, mode, version))
    assert result.validation is not None and result.validation["ok"], result.validation
    if matrix.shares(cell):
        # The same repository as a cell checked just before (asserted by its fingerprint): the
        # same server answered that cell's requests; sending them again would prove nothing new.
        return
    if layout == "llmapi":
        _check_llmapi(result, mode, version)
    else:
        _check_inflight(result, mode, version)


def test_reverting_finding_1_fails_as_triton_fails_on_a_gpu(tmp_path):
    """Mutation proof of the BLS asking < 1.2 models only for outputs they declare. Stands for the upstream fact that Triton core refuses a
    request for an output the model does not declare ("unexpected inference output",
    triton-inference-server/core src/infer_request.cc `Normalize`), and that TensorRT-LLM < 1.2's
    tensorrt_llm declares no `num_input_tokens` / `num_output_tokens` (tests/contracts/trtllm-1.1.json,
    from tensorrtllm_backend c2e65b8). The 1.1 draft-target twin, with the BLS asking the LLM models
    for the token counts again (the code before the fix), fails with Triton's own message."""
    import re

    from toolkit.deploy import render
    from toolkit.progress import quiet
    from toolkit.server.launch import TritonServer

    recipe = _recipe("inflight_batcher_llm", "draft_target", "1.1.0")
    _, rendered = render(recipe, backend=None, workdir=tmp_path / "wd", progress=quiet)
    bls = rendered.path / "tensorrt_llm_bls" / "1" / "sdtk_serving" / "bls.py"
    code = bls.read_text()
    reverted, n = re.subn(
        r'(\nLLM_OUTPUTS = \([^)]*"total_draft_tokens",\n)\)',
        r'\1    "num_input_tokens",\n    "num_output_tokens",\n)',
        code,
    )
    assert n == 1, "the BLS's LLM_OUTPUTS tuple moved: update the mutation"
    bls.write_text(reverted)
    # serving(): stopped with the short grace of tests/triton_support.py (a graceful Triton
    # shutdown waits ~1 s per model; the stop is not what this test checks).
    with serving(
        TritonServer(rendered.path, workdir=tmp_path / "srv", model_name="tensorrt_llm_bls", auto_ports=True)
    ) as server:
        r = httpx.post(
            f"{server.http_url}/v2/models/tensorrt_llm_bls/generate",
            json={"text_input": PROMPT, "max_tokens": 8},
            timeout=60,
        )
    assert r.status_code >= 400
    assert "unexpected inference output 'num_input_tokens' for model 'tensorrt_llm_draft'" in r.text, r.text
