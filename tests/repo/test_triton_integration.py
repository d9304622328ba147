"""The reference repository in a real Triton: sdtk's Python models, the ensemble, the BLS loop.

Renders reference repositories for the tiny models (models/tiny, or $SDTK_TINY_MODELS), starts
the embedded CPU tritonserver (toolkit.server) and checks, over HTTP, that every mode's output
equals the target's own greedy decoding (lossless), that streaming chunks add up to the
non-streamed text, and that the BLS draft-target loop reports acceptance for the whole request.

Skipped, with the reason, when the reference runtime (torch), the tiny models or a tritonserver
are missing.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from triton_support import serving, tritonserver_missing

pytestmark = [pytest.mark.tritonserver, pytest.mark.slow]

TINY = Path(os.environ.get("SDTK_TINY_MODELS") or Path(__file__).resolve().parents[2] / "models" / "tiny")
PROMPTS = ["def fibonacci(n):\n    ", "import os\nimport sys\n\n", "class Stack:\n    def __init__(self):\n"]
NEW_TOKENS = 24
HEADS = {"medusa": ("medusa_heads", "medusa"), "eagle3": ("eagle_head", "eagle3")}


def _has_weights(path: Path) -> bool:
    return (path / "config.json").is_file() and any(path.glob("*.safetensors"))


@pytest.fixture(scope="module")
def tiny() -> Path:
    pytest.importorskip("torch", reason="the reference runtime needs torch (the `reference` extra)")
    if tritonserver_missing():
        pytest.skip(tritonserver_missing())
    assert _has_weights(TINY / "target"), f"{TINY / 'target'} has no weights (models/tiny is committed)"
    return TINY


@pytest.fixture(scope="module")
def runtime(tiny: Path) -> Any:
    from toolkit.reference import ReferenceRuntime

    return ReferenceRuntime.load(target=tiny / "target")


@pytest.fixture(scope="module")
def expected(runtime: Any) -> dict[str, str]:
    """The target's plain greedy text per prompt, as the ensemble returns it (prompt excluded)."""
    from toolkit.reference import PLAIN

    out = {}
    for prompt in PROMPTS:
        ids = runtime.tokenizer.encode(prompt)
        tokens = runtime.generate(ids, NEW_TOKENS, spec=PLAIN).token_ids
        if tokens and tokens[-1] == runtime.eos_token_id:
            tokens = tokens[:-1]
        out[prompt] = runtime.tokenizer.decode(tokens, skip_special_tokens=True)
    return out


def _engine(path: Path, recipe: Any, role: str, tiny: Path) -> Path:
    """A reference engine directory (docs/contracts.md) for the tiny checkpoints."""
    from toolkit.build.context import SPEC_MODE_NAMES

    path.mkdir(parents=True, exist_ok=True)
    spec = recipe.speculative
    target = role == "target"
    cfg = {
        "version": "sdtk-reference-test",
        "pretrained_config": {"dtype": "float32", "mapping": {"world_size": 1, "tp_size": 1, "pp_size": 1}},
        "build_config": {
            "max_input_len": 256,
            "max_seq_len": 512,
            "max_batch_size": 8,  # the served batching tests run up to 8 requests in one batch
            "max_num_tokens": 1024,
            "max_draft_len": spec.draft_len if target else 0,
            "speculative_decoding_mode": SPEC_MODE_NAMES[recipe.mode] if target else None,
        },
        "reference": {
            "role": role,
            "checkpoint": str(tiny / role),
            "tokenizer": str(tiny / "target"),
            "draft": str(tiny / "draft") if target and recipe.mode == "draft_target" else None,
            "medusa_heads": str(tiny / "medusa") if target and recipe.mode == "medusa" else None,
            "eagle_head": str(tiny / "eagle3") if target and recipe.mode == "eagle3" else None,
            "speculative": spec.model_dump(mode="json"),
        },
    }
    (path / "config.json").write_text(json.dumps(cfg))
    return path


def _serve(tmp: Path, tiny: Path, mode: str, spec: dict[str, Any], decoupled: bool):
    from toolkit.recipe import parse_recipe
    from toolkit.repo import render_repository
    from toolkit.server.launch import TritonServer

    models = {"target": str(tiny / "target")}
    if mode in ("draft_target", "medusa", "eagle3"):
        role, folder = {"draft_target": ("draft", "draft"), **HEADS}[mode]
        from toolkit.hub import has_weights

        assert has_weights(tiny / folder), f"{tiny / folder} has no weights (models/tiny is committed)"
        models[role] = str(tiny / folder)
    recipe = parse_recipe(
        {"name": f"it-{mode}", "backend": "reference", "models": models, "speculative": spec,
         "serving": {"decoupled": decoupled}}
    )  # fmt: skip
    engines = {"target": _engine(tmp / "engines" / "target", recipe, "target", tiny)}
    if mode == "draft_target":
        engines["draft"] = _engine(tmp / "engines" / "draft", recipe, "draft", tiny)
    result = render_repository(recipe, engines, tmp / "repo", backend="reference")
    server = TritonServer(result.path, workdir=tmp / "server", auto_ports=True, model_name=result.entry_model)
    return result, server


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    # The completion only, as sdtk's own clients ask (the deployment's default keeps the prompt,
    # upstream's default for exclude_input_in_output).
    body = {"exclude_input_in_output": True, **body}
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    try:
        with urllib.request.urlopen(req, timeout=300) as r:  # noqa: S310 - our own server
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise AssertionError(f"{url}: HTTP {e.code}: {e.read().decode()}") from None


def _stream(url: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(req, timeout=300) as r:  # noqa: S310 - our own server
        events = [json.loads(line[5:]) for line in r.read().decode().splitlines() if line.startswith("data:")]
    errors = [e["error"] for e in events if "error" in e]
    assert not errors, errors
    return events


@pytest.fixture(scope="module")
def draft_target(tiny: Path, tmp_path_factory) -> Any:
    """One deployment for the BLS loop (entry point) and the ensemble (plain target), not decoupled:
    the repository upstream's draft-target example deploys (decoupled_mode:False on all three)."""
    result, server = _serve(
        tmp_path_factory.mktemp("dt"),
        tiny,
        "draft_target",
        {"mode": "draft_target", "max_draft_len": 4},
        False,
    )
    with serving(server):
        yield result, server.http_url


def test_bls_draft_target_is_lossless_and_counts_the_whole_request(draft_target, expected):
    result, base = draft_target
    assert result.entry_model == "tensorrt_llm_bls"
    for prompt in PROMPTS:
        out = _post(
            f"{base}/v2/models/tensorrt_llm_bls/generate",
            {"text_input": prompt, "max_tokens": NEW_TOKENS, "return_perf_metrics": True},
        )
        assert out["text_output"] == expected[prompt]
        drafted, accepted = out["total_draft_tokens"], out["total_accepted_draft_tokens"]
        assert drafted > 4, "acceptance is summed over every iteration, not the last one"
        assert 0 <= accepted <= drafted
        assert out["acceptance_rate"] == pytest.approx(accepted / drafted, abs=1e-6)


def test_bls_refuses_streaming_as_upstreams_does(draft_target):
    """Draft-target's BLS is not decoupled, so it cannot stream: a 400 with the C++ backend's words
    ("Streaming is only supported if model is deployed using decoupled mode", tensorrtllm_backend
    inflight_batcher_llm/src/utils.cc), on the twin as on a GPU."""
    _, base = draft_target
    for model in ("tensorrt_llm_bls", "ensemble"):
        body = json.dumps({"text_input": PROMPTS[0], "max_tokens": 4, "stream": True}).encode()
        req = urllib.request.Request(f"{base}/v2/models/{model}/generate_stream", data=body, method="POST")
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=60)  # noqa: S310 - our own server
        assert err.value.code == 400
        assert "Streaming is only supported if model is deployed using decoupled mode" in err.value.read().decode()


def test_ensemble_and_rollback_are_plain(draft_target, expected):
    _, base = draft_target
    prompt = PROMPTS[1]
    plain = _post(
        f"{base}/v2/models/ensemble/generate",
        {"text_input": prompt, "max_tokens": NEW_TOKENS, "return_perf_metrics": True},
    )
    assert plain["text_output"] == expected[prompt] and plain["total_draft_tokens"] == 0
    off = _post(
        f"{base}/v2/models/tensorrt_llm_bls/generate",
        {"text_input": prompt, "max_tokens": NEW_TOKENS, "num_draft_tokens": 0, "return_perf_metrics": True},
    )
    assert off["text_output"] == expected[prompt] and off["total_draft_tokens"] == 0


def test_bls_after_plain_requests_is_still_lossless(draft_target, expected):
    """The target model serves plain (ensemble) and verification (BLS) requests in turn."""
    _, base = draft_target
    for prompt in PROMPTS:
        _post(f"{base}/v2/models/ensemble/generate", {"text_input": prompt, "max_tokens": 8})
        out = _post(
            f"{base}/v2/models/tensorrt_llm_bls/generate", {"text_input": prompt, "max_tokens": NEW_TOKENS}
        )
        assert out["text_output"] == expected[prompt]


# Non-decoupled ensembles; tests/integration/test_deploy.py deploys every tiny recipe decoupled
# (ngram, lookahead, medusa, eagle3), so one mode here covers the other transaction policy.
@pytest.mark.parametrize(("mode", "spec"), [("medusa", {"mode": "medusa"})])
def test_ensemble_speculation_is_lossless(tiny, tmp_path, expected, mode, spec):
    if mode == "medusa":
        from toolkit.hub import medusa_heads
        from toolkit.trees import MEDUSA_MC_SIM_7B_63

        info = medusa_heads(tiny / "medusa") if (tiny / "medusa").is_dir() else None
        heads = (info or {}).get("num_heads") or 4
        spec = {
            **spec,
            "num_medusa_heads": heads,
            "medusa_choices": [c for c in MEDUSA_MC_SIM_7B_63 if len(c) <= heads],
        }
    result, server = _serve(tmp_path, tiny, mode, spec, decoupled=False)
    with serving(server):
        base = server.http_url
        for prompt in PROMPTS:
            out = _post(
                f"{base}/v2/models/ensemble/generate",
                {"text_input": prompt, "max_tokens": NEW_TOKENS, "return_perf_metrics": True},
            )
            assert out["text_output"] == expected[prompt], (mode, prompt)
            assert out["total_draft_tokens"] >= out["total_accepted_draft_tokens"] >= 0
        assert result.entry_model == "ensemble"
