"""Fixtures for tests/ops: recipes for the layouts, and a real embedded Triton serving spec_model/."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from triton_support import STOP_GRACE_S, tritonserver_missing

from toolkit.recipe import parse_recipe

SPEC_MODEL = Path(__file__).parent / "spec_model"


@pytest.fixture
def recipe_tp8():
    """Llama-3.1-8B EAGLE-1-free engine recipe on one 8-GPU node (custom ports)."""
    return parse_recipe(
        {
            "name": "llama-8b-tp8",
            "backend": "engine",
            "trtllm_version": "1.1.0",
            "models": {"target": "meta-llama/Llama-3.1-8B-Instruct"},
            "speculative": {"mode": "lookahead", "window": 4, "ngram": 3, "verification_set": 4},
            "parallel": {"tp": 8},
            "serving": {"http_port": 9000, "grpc_port": 9001, "metrics_port": 9002, "model_name": "ensemble"},
        }
    )


@pytest.fixture
def recipe_tp8_pp2():
    """Llama-3.3-70B on two 8-GPU nodes (TP=8 × PP=2 = 16 ranks), engine leader mode."""
    return parse_recipe(
        {
            "name": "llama-70b-tp8pp2",
            "backend": "engine",
            "trtllm_version": "1.1.0",
            "models": {"target": "meta-llama/Llama-3.3-70B-Instruct"},
            "parallel": {"tp": 8, "pp": 2},
        }
    )


_embedded_available = tritonserver_missing


def spec_repo(root: Path, models: dict[str, int]) -> Path:
    """A model repository with one spec_model per entry (name -> draft_len; 0 = baseline)."""
    repo = root / "repo"
    for name, draft_len in models.items():
        d = repo / name
        (d / "1").mkdir(parents=True)
        shutil.copy(SPEC_MODEL / "model.py", d / "1" / "model.py")
        cfg = (SPEC_MODEL / "config.pbtxt").read_text()
        cfg += f'parameters {{ key: "draft_len" value: {{ string_value: "{draft_len}" }} }}\n'
        (d / "config.pbtxt").write_text(f'name: "{name}"\n' + cfg)
    return repo


@pytest.fixture(scope="module")
def live_triton(tmp_path_factory):
    """The embedded Triton 2.51 serving `spec` (drafting 4, accepting 2 per step) and `baseline`."""
    why = _embedded_available()
    if why:
        pytest.skip(why)
    from toolkit.server.launch import TritonServer

    root = tmp_path_factory.mktemp("live_triton")
    repo = spec_repo(root, {"spec": 4, "baseline": 0})
    server = TritonServer(repo, workdir=root / "work", model_name="spec", auto_ports=True, ready_timeout=120)
    server.start()
    try:
        yield server
    finally:
        server.stop(grace=STOP_GRACE_S)  # the stop is not under test here (test_server_lifecycle.py)
