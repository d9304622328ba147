"""The LLM-API Triton model's contract served on CPU.

The recipes tiny-eagle3-llmapi / tiny-ngram-llmapi render the same config.pbtxt and model.yaml as the
llmapi backend, served by sdtk's reference llmapi model on the real embedded Triton. Requests go over
raw HTTP as upstream documents them (tensorrtllm_backend docs/llmapi.md:
`{"text_input": ..., "sampling_param_max_tokens": 10}`, perf metrics returned as strings), and the
greedy text is checked against plain transformers (an independent yardstick).
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from .test_deploy import TINY, greedy_reference, sdtk, triton_processes

pytestmark = [
    pytest.mark.tritonserver,
    pytest.mark.slow,
    pytest.mark.skipif(not (TINY / "target" / "config.json").exists(), reason="models/tiny not present"),
]

PROMPT = "def fibonacci(n):"


def _sse(base: str, body: dict) -> list[dict]:
    events = []
    with httpx.stream("POST", f"{base}/v2/models/tensorrt_llm/generate_stream", json=body, timeout=60) as r:
        for line in r.iter_lines():
            if line.startswith("data:"):
                events.append(json.loads(line[5:]))
    return events


def test_eagle3_llmapi_contract_on_cpu(tmp_path):
    r = sdtk("deploy", "recipes/tiny-eagle3-llmapi.yaml", "--workdir", str(tmp_path), "--detach", "--auto-ports",
             "--json")  # fmt: skip
    wd = tmp_path / "tiny-eagle3-llmapi"
    try:
        assert r.returncode == 0, r.stderr[-3000:]
        info = json.loads(r.stdout)
        assert info["model"] == "tensorrt_llm" and info["entry_kind"] == "llmapi"
        checks = {c["name"]: c["status"] for c in info["validation"]["checks"]}
        assert checks == {
            "server": "passed", "model": "passed", "http-generate": "passed", "http-stream": "passed",
            "grpc": "passed", "correctness": "passed", "acceptance": "passed", "bad-input": "passed",
        }, info["validation"]  # fmt: skip
        repo = wd / "triton_repo" / "tensorrt_llm"
        assert (repo / "1" / "model.yaml").is_file() and (repo / "config.pbtxt").is_file()
        base = info["http_url"]

        # The documented request; greedy text (prompt excluded) equals the target's own.
        body = {"text_input": PROMPT, "sampling_param_max_tokens": 16, "sampling_param_exclude_input_from_output": True,
                "sampling_param_return_perf_metrics": True, "return_finish_reason": True}  # fmt: skip
        out = httpx.post(f"{base}/v2/models/tensorrt_llm/generate", json=body, timeout=60).json()
        assert out["text_output"] == greedy_reference(PROMPT, 16)
        assert out["finish_reason"] == "length"
        for name in ("acceptance_rate", "total_accepted_draft_tokens", "total_draft_tokens", "arrival_time_ns",
                     "first_token_time_ns", "last_token_time_ns", "kv_cache_hit_rate"):  # fmt: skip
            assert isinstance(out[name], str), name  # upstream sends them with text_output's dtype
        assert int(out["total_draft_tokens"]) > 0
        assert 0 <= float(out["acceptance_rate"]) <= 1

        # Upstream's default keeps the prompt in front (sampling_param_exclude_input_from_output false).
        plain = httpx.post(f"{base}/v2/models/tensorrt_llm/generate",
                           json={"text_input": PROMPT, "sampling_param_max_tokens": 16}, timeout=60).json()  # fmt: skip
        assert plain["text_output"].startswith(PROMPT) and "acceptance_rate" not in plain

        # Streaming via `streaming`: every response carries the whole text so far.
        events = _sse(base, {**body, "streaming": True, "return_finish_reason": False})
        texts = [e["text_output"] for e in events]
        assert len(texts) > 1 and all(b.startswith(a) for a, b in zip(texts, texts[1:], strict=False))
        assert texts[-1] == out["text_output"]

        # Refusals name the input.
        for bad, word in (({"sampling_param_max_tokens": 0}, "sampling_param_max_tokens"),
                          ({"sampling_param_max_tokens": 1024}, "max_seq_len")):  # fmt: skip
            e = httpx.post(
                f"{base}/v2/models/tensorrt_llm/generate", json={"text_input": PROMPT, **bad}, timeout=60
            )
            assert e.status_code == 400 and word in e.json()["error"], e.text  # INVALID_ARG, not 500

        # sdtk's own client speaks the same contract: infer and a short bench.
        inf = sdtk("infer", PROMPT, "--workdir", str(wd), "--max-tokens", "16", "--json")
        assert inf.returncode == 0, inf.stderr
        served = json.loads(inf.stdout)
        assert served["text"] == out["text_output"] and served["total_draft_tokens"] > 0
        st = sdtk("infer", PROMPT, "--workdir", str(wd), "--max-tokens", "16", "--stream", "--json")
        assert st.returncode == 0 and json.loads(st.stdout)["text"] == out["text_output"], st.stderr
        b = sdtk("bench", "--workdir", str(wd), "--concurrency", "1", "--requests", "2", "--warmup", "0",
                 "--max-tokens", "8", "--json")  # fmt: skip
        assert b.returncode == 0, b.stderr[-2000:]
        # Exact counts: the llmapi model returns none, so the recipe's tokenizer counts the cumulative
        # text; the tiny target runs every code prompt to sampling_param_max_tokens (finish "length").
        bench = json.loads(b.stdout)
        assert bench["token_counts_exact"] is True
        records = [
            json.loads(x) for x in (Path(bench["report_dir"]) / "requests.jsonl").read_text().splitlines()
        ]
        assert len(records) == 2 and all(r["token_count_source"] == "tokenizer" for r in records)
        assert [sum(r["chunk_tokens"]) for r in records] == [8, 8]
        # Acceptance is asked for with sampling_param_return_perf_metrics and read back from its strings.
        assert all(r["draft_tokens"] > 0 and r["accepted_draft_tokens"] is not None for r in records)
    finally:
        s = sdtk("stop", "--workdir", str(wd))
    assert s.returncode == 0, s.stderr
    assert triton_processes(tmp_path) == []


def test_ngram_llmapi_deploys_and_validates(tmp_path):
    r = sdtk("deploy", "recipes/tiny-ngram-llmapi.yaml", "--workdir", str(tmp_path), "--detach", "--auto-ports",
             "--json")  # fmt: skip
    try:
        assert r.returncode == 0, r.stderr[-3000:]
        info = json.loads(r.stdout)
        checks = {c["name"]: c["status"] for c in info["validation"]["checks"]}
        assert checks["correctness"] == "passed" and checks["acceptance"] == "passed", info["validation"]
        model = (tmp_path / "tiny-ngram-llmapi/triton_repo/tensorrt_llm/1/model.yaml").read_text()
        assert "decoding_type: NGram" in model and "max_batch_size: 0" in model
    finally:
        s = sdtk("stop", "--workdir", str(tmp_path / "tiny-ngram-llmapi"))
    assert s.returncode == 0, s.stderr
    assert triton_processes(tmp_path) == []
