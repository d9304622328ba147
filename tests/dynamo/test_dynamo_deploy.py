"""`sdtk deploy --target dynamo` for real: NVIDIA Dynamo 1.6.1's frontend (file discovery, TCP
request plane, ZMQ event plane) and two of sdtk's reference-runtime workers, on this CPU.

One deployment (EAGLE-3, the tiny target) checks: READY through the CLI, `sdtk validate` over the
OpenAI endpoints (every check passed), `sdtk status` running
with both workers named and nothing off loopback, greedy /v1/completions text equal to
transformers' greedy continuation of the same tokens for two prompts, requests served by both
workers (each worker's own sdtk_spec_requests_total grows), and `sdtk stop` leaving no process
of the deployment and no port it listened on.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import socket
import time
from pathlib import Path

import pytest
from cli_support import sdtk

pytestmark = [
    pytest.mark.slow,
    # dynamo.frontend, not dynamo: with tests/ on sys.path (tests/conftest.py), this directory
    # is a namespace package named `dynamo` wherever the real one is missing.
    pytest.mark.skipif(
        importlib.util.find_spec("dynamo.frontend") is None,
        reason="ai-dynamo is not installed (scripts/setup_env.sh installs it; SDTK_DYNAMO=0 skips it)",
    ),
]

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "tiny-eagle3.yaml"
PROMPTS = ("def fibonacci(n):", "class Stack:\n    def __init__(self):")
MAX_TOKENS = 16


@functools.cache
def _target():
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = ROOT / "models" / "tiny" / "target"
    model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32).eval()
    return AutoTokenizer.from_pretrained(path), model


def transformers_greedy(prompt: str) -> str:
    """The tiny target's greedy continuation by transformers.generate (BOS added, as the
    tokenizer does and sdtk's worker does for the frontend's ids)."""
    import torch

    tok, model = _target()
    ids = tok(prompt, return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        out = model.generate(ids, max_new_tokens=MAX_TOKENS, do_sample=False, eos_token_id=tok.eos_token_id)
    return str(tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True))


def served_counts(processes: dict) -> dict[str, float]:
    import httpx

    out = {}
    for name, p in processes.items():
        if p.get("metrics_url"):
            text = httpx.get(p["metrics_url"], timeout=5).text
            out[name] = sum(
                float(line.rsplit(" ", 1)[1])
                for line in text.splitlines()
                if line.startswith("sdtk_spec_requests_total{")
            )
    return out


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_two_workers_greedy_equal_to_transformers_and_stop_leaves_nothing(tmp_path):
    import httpx

    workdir = tmp_path / "wd"
    r = sdtk(
        "deploy",
        str(RECIPE),
        "--target",
        "dynamo",
        "--workers",
        "2",
        "--detach",
        "--auto-ports",
        "--no-validate",
        "--workdir",
        str(workdir),
        "--json",
    )
    root = workdir / "tiny-eagle3"
    try:
        assert r.returncode == 0, r.stderr[-3000:]
        ready = json.loads(r.stdout)
        url, model = ready["http_url"], ready["model"]
        assert model == "tiny-eagle3" and url.startswith("http://127.0.0.1:")
        processes = json.loads((root / "dynamo" / "processes.json").read_text())
        assert sorted(processes) == ["frontend", "worker-0", "worker-1"]
        pids = [p["pid"] for p in processes.values()] + [ready["pid"]]
        ports = [int(url.rsplit(":", 1)[1])] + [
            int(p["metrics_url"].split(":")[2].split("/")[0]) for p in processes.values() if p["metrics_url"]
        ]

        # sdtk validate over the OpenAI API: completions and chat, streamed and not, the gate, a 4xx.
        v = sdtk("validate", "--workdir", str(root), "--json")
        assert v.returncode == 0, v.stdout[-3000:] + v.stderr[-2000:]
        checks = {c["name"]: c["status"] for c in json.loads(v.stdout)["checks"]}
        assert checks == dict.fromkeys(
            ("server", "completions", "completions-stream", "chat", "correctness", "bad-input"), "passed"
        )

        st = sdtk("status", "--workdir", str(root))
        assert st.returncode == 0, st.stdout + st.stderr
        assert "worker-0 pid" in st.stdout and "worker-1 pid" in st.stdout
        assert "off loopback: nothing" in st.stdout

        before = served_counts(processes)
        texts = []
        for prompt in PROMPTS * 2:  # round-robin: each prompt once on each worker
            resp = httpx.post(
                f"{url}/v1/completions",
                json={"model": model, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0},
                timeout=120,
            )
            assert resp.status_code == 200, resp.text
            texts.append(resp.json()["choices"][0]["text"])
        after = served_counts(processes)
        assert all(after[w] > before[w] for w in before), (before, after)
        assert texts[:2] == texts[2:]  # the same greedy text from either worker
        for prompt, got in zip(PROMPTS, texts[:2], strict=True):
            assert got == transformers_greedy(prompt), prompt
    finally:
        stop = sdtk("stop", "--workdir", str(root))
    assert stop.returncode == 0, stop.stderr
    assert stop.stdout.startswith("stopped the Dynamo supervisor") and "worker-1 (pid" in stop.stdout, (
        stop.stdout
    )
    deadline = time.monotonic() + 5
    while (
        any(Path(f"/proc/{p}").exists() and "Z" not in _state(p) for p in pids)
        and time.monotonic() < deadline
    ):
        time.sleep(0.1)
    assert [p for p in pids if Path(f"/proc/{p}").exists() and "Z" not in _state(p)] == []
    assert [p for p in ports if listening(p)] == []
    assert not (root / "state.json").exists()


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"
