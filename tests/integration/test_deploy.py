"""`sdtk deploy` end to end on the real embedded Triton server with the tiny trained models.

Every tiny recipe is built, rendered, launched, validated (HTTP generate, gRPC streaming,
the correctness gate against the in-process baseline, acceptance read back) and stopped.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
SDTK = [sys.executable, "-m", "toolkit.cli"]
TINY = ROOT / "models" / "tiny"

pytestmark = [
    pytest.mark.tritonserver,
    pytest.mark.slow,
]


def sdtk(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [*SDTK, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=ROOT,
    )


def triton_processes(workdir: Path) -> list[int]:
    """tritonserver / stub processes whose command line mentions this workdir."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(workdir) in cmd and ("tritonserver" in cmd or "triton_python_backend_stub" in cmd):
            out.append(int(d.name))
    return out


def greedy_reference(prompt: str, max_tokens: int) -> str:
    """The target's own greedy continuation, computed with plain transformers."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(TINY / "target")
    model = AutoModelForCausalLM.from_pretrained(TINY / "target", dtype=torch.float32).eval()
    ids = tok(prompt, return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        out = model.generate(ids, do_sample=False, max_new_tokens=max_tokens, pad_token_id=tok.eos_token_id)
    return tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True)


# tiny-baseline, tiny-medusa, tiny-lookahead and tiny-draft-target deploy with validation in
# tests/integration/test_version_matrix.py (the newest contract's cells, through the same deploy());
# here the CLI path and Triton's /metrics, on the two modes only the twin has.
@pytest.mark.parametrize("recipe", ["tiny-ngram", "tiny-eagle3", "tiny-sa", "tiny-pard", "tiny-mtp"])
def test_tiny_recipe_deploys_and_validates(tmp_path, recipe):
    """Deploy with validation on: HTTP generate + stream, gRPC streaming, correctness gate, acceptance."""
    r = sdtk(
        "deploy", f"recipes/{recipe}.yaml", "--workdir", str(tmp_path), "--detach", "--auto-ports", "--json"
    )
    try:
        assert r.returncode == 0, r.stderr[-3000:]
        info = json.loads(r.stdout)
        checks = {c["name"]: c["status"] for c in info["validation"]["checks"]}
        assert checks["correctness"] == "passed", info["validation"]
        assert checks["grpc"] == "passed" and checks["http-generate"] == "passed"
        assert checks.get("http-stream") == "passed"
        if recipe != "tiny-baseline":
            assert info["validation"]["acceptance"]["accepted_tokens"] > 0, info["validation"]
        # The reference backend exports the same acceptance counters on Triton's own /metrics.
        import httpx

        metrics = httpx.get(info["metrics_url"], timeout=10).text
        counts = {
            line.split("{")[0]: float(line.rsplit(" ", 1)[1])
            for line in metrics.splitlines()
            if line.startswith("sdtk_spec_") and 'model="tensorrt_llm"' in line
        }
        assert counts.get("sdtk_spec_requests_total", 0) > 0, metrics[-2000:]
        if recipe != "tiny-baseline":
            assert counts["sdtk_spec_accepted_tokens_total"] > 0
    finally:
        s = sdtk("stop", "--workdir", str(tmp_path / recipe))
    assert s.returncode == 0, s.stderr
    assert triton_processes(tmp_path) == []


def test_draft_target_done_criterion(tmp_path):
    """`deploy --detach --json` returns URLs; plain tritonclient to `ensemble` gives the greedy continuation."""
    import tritonclient.grpc as grpcclient

    r = sdtk(
        "deploy",
        "recipes/tiny-draft-target.yaml",
        "--workdir",
        str(tmp_path),
        "--detach",
        "--auto-ports",
        "--json",
    )
    wd = tmp_path / "tiny-draft-target"
    try:
        assert r.returncode == 0, r.stderr[-3000:]
        info = json.loads(r.stdout)
        for key in ("pid", "http_url", "grpc_url", "metrics_url", "model", "model_repo"):
            assert info[key], key
        assert info["model"] == "tensorrt_llm_bls"
        checks = {c["name"]: c["status"] for c in info["validation"]["checks"]}
        assert checks["correctness"] == "passed" and checks["acceptance"] == "passed"

        prompt, n = "def fib(n):", 32
        results = []

        def callback(result, error):
            results.append(error or result)

        client = grpcclient.InferenceServerClient(info["grpc_url"])
        inputs = []
        for name, value, dtype in (
            ("text_input", np.array([[prompt.encode()]], dtype=object), "BYTES"),
            ("max_tokens", np.array([[n]], dtype=np.int32), "INT32"),
            ("exclude_input_in_output", np.array([[True]], dtype=bool), "BOOL"),
        ):
            x = grpcclient.InferInput(name, list(value.shape), dtype)
            x.set_data_from_numpy(value)
            inputs.append(x)
        client.start_stream(callback=callback)
        client.async_stream_infer("ensemble", inputs)
        client.stop_stream()
        client.close()
        assert results and not isinstance(results[0], Exception), results
        text = "".join(
            r.as_numpy("text_output").reshape(-1)[0].decode()
            for r in results
            if r.as_numpy("text_output") is not None
        )
        assert text == greedy_reference(prompt, n)

        # The served BLS output (speculative) equals `sdtk generate --no-speculation`.
        g = sdtk(
            "generate",
            "recipes/tiny-draft-target.yaml",
            "--prompt",
            prompt,
            "--max-tokens",
            str(n),
            "--no-speculation",
            "--json",
        )
        assert g.returncode == 0, g.stderr
        inf = sdtk("infer", prompt, "--workdir", str(wd), "--max-tokens", str(n), "--json")
        assert inf.returncode == 0, inf.stderr
        served = json.loads(inf.stdout)
        assert served["text"] == json.loads(g.stdout)["text"]
        assert served["total_draft_tokens"] > 0

        st = sdtk("status", "--workdir", str(wd), "--json")
        assert st.returncode == 0 and json.loads(st.stdout)["state"] == "running"
    finally:
        stop = sdtk("stop", "--workdir", str(wd))
    assert stop.returncode == 0
    assert triton_processes(tmp_path) == []
    st = sdtk("status", "--workdir", str(wd))
    assert st.returncode == 1


def test_port_taken_is_reported_before_launch(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = sdtk(
            "deploy",
            "recipes/tiny-baseline.yaml",
            "--workdir",
            str(tmp_path),
            "--detach",
            "--http-port",
            str(port),
            "--no-validate",
        )
    assert r.returncode != 0
    err = r.stderr.strip().splitlines()
    assert any(str(port) in line and line.startswith("error:") for line in err), r.stderr
    assert "Traceback" not in r.stderr
    assert triton_processes(tmp_path) == []


def test_bad_tokenizer_path_reports_tritons_message(tmp_path):
    """A tokenizer directory without tokenizer files fails model load; the error carries Triton's words."""
    empty = tmp_path / "empty_tokenizer"
    empty.mkdir()
    r = sdtk(
        "deploy",
        "recipes/tiny-baseline.yaml",
        "--workdir",
        str(tmp_path / "wd"),
        "--detach",
        "--auto-ports",
        "--set",
        f"models.tokenizer.path={empty}",
        "--ready-timeout",
        "300",
    )
    assert r.returncode != 0
    err = r.stderr
    assert "error:" in err and "preprocessing" in err, err[-3000:]
    assert "Traceback" not in err.split("error:", 1)[1]
    assert triton_processes(tmp_path) == []
