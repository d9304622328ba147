"""Fixtures for the server/client tests: fake LLM model repositories and /proc checks.

The fake model (fake_llm/model.py) stands in for the TRT-LLM ensemble: same input/output
names, decoupled streaming, acceptance outputs. It runs in the real (embedded) tritonserver.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from triton_support import config_pbtxt as shared_config_pbtxt
from triton_support import tritonserver_missing

from toolkit.server import procs

MODEL_PY = Path(__file__).parent / "fake_llm" / "model.py"

_INPUTS = [
    ("text_input", "TYPE_STRING", False),
    ("max_tokens", "TYPE_INT32", False),
    ("exclude_input_in_output", "TYPE_BOOL", True),
    ("stream", "TYPE_BOOL", True),
    ("temperature", "TYPE_FP32", True),
    ("top_k", "TYPE_INT32", True),
    ("top_p", "TYPE_FP32", True),
    ("seed", "TYPE_UINT64", True),
    ("end_id", "TYPE_INT32", True),
    ("return_perf_metrics", "TYPE_BOOL", True),
]
_OUTPUTS = [
    ("text_output", "TYPE_STRING", "-1"),
    ("acceptance_rate", "TYPE_FP32", "1"),
    ("total_accepted_draft_tokens", "TYPE_INT32", "1"),
    ("total_draft_tokens", "TYPE_INT32", "1"),
    ("num_output_tokens", "TYPE_INT32", "1"),
    ("arrival_time_ns", "TYPE_INT64", "1"),
    ("first_token_time_ns", "TYPE_INT64", "1"),
    ("last_token_time_ns", "TYPE_INT64", "1"),
]


def config_pbtxt(
    name: str,
    *,
    decoupled: bool = True,
    max_batch_size: int = 8,
    bls: bool = False,
    token_delay_ms: float = 0,
    fail_initialize: bool = False,
    lose_handshake: bool = False,
) -> str:
    inputs = list(_INPUTS) + ([("num_draft_tokens", "TYPE_INT32", True)] if bls else [])
    return shared_config_pbtxt(
        name,
        inputs=[(n, t, "1", opt) for n, t, opt in inputs],
        outputs=_OUTPUTS,
        decoupled=decoupled,
        max_batch_size=max_batch_size,
        parameters={
            "token_delay_ms": str(token_delay_ms),
            "fail_initialize": "1" if fail_initialize else "0",
            "lose_handshake": "1" if lose_handshake else "0",
        },
    )


def add_model(repo: Path, name: str, **kwargs) -> Path:
    d = repo / name
    (d / "1").mkdir(parents=True, exist_ok=True)
    shutil.copy(MODEL_PY, d / "1" / "model.py")
    (d / "config.pbtxt").write_text(config_pbtxt(name, **kwargs))
    return d


@pytest.fixture
def make_repo(tmp_path: Path) -> Callable[..., Path]:
    """make_repo({"ensemble": dict(decoupled=True), ...}) → a fresh model repository."""
    count = [0]

    def make(models: dict[str, dict]) -> Path:
        count[0] += 1
        repo = tmp_path / f"repo{count[0]}"
        repo.mkdir()
        for name, kw in models.items():
            add_model(repo, name, **kw)
        return repo

    return make


def processes_mentioning(text: str) -> list[tuple[int, str]]:
    """Live processes whose command line contains `text` (e.g. a test's tmp dir): tritonserver
    has it in --model-repository, the Python backend stubs in their model.py path."""
    out = []
    for entry in procs.PROC.iterdir():
        if entry.name.isdigit():
            pid = int(entry.name)
            argv = procs.cmdline(pid)
            if any(text in a for a in argv) and procs.alive(pid):
                out.append((pid, " ".join(argv)[:200]))
    return out


def embedded_available() -> bool:
    return tritonserver_missing() is None


def pytest_collection_modifyitems(config, items):
    """Skip `tritonserver` tests only where no tritonserver can exist (no nvidia-pytriton)."""
    if embedded_available():
        return
    skip = pytest.mark.skip(reason=str(tritonserver_missing()))
    for item in items:
        if "tritonserver" in item.keywords:
            item.add_marker(skip)
