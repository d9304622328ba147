"""Regression test for the BLS stub crash: the minimal reproduction of tests/stress/bls_repro,
in its `fixed` variant (what sdtk's tensorrt_llm_bls does), under concurrent traffic.

`scripts/bench.py run stress_served --bls-repro naive` runs the `naive` variant, whose stub dies within
seconds on Triton 2.51 (kept out of the suite: it kills a process on purpose).
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import httpx
import pytest
from triton_support import serving

from toolkit.server.launch import TritonServer
from toolkit.server.state import python_stubs

REPO = Path(__file__).parent / "bls_repro"

pytestmark = [pytest.mark.tritonserver, pytest.mark.slow]


def test_fixed_bls_survives_concurrent_decoupled_sub_requests(tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(REPO, repo)
    # serving(): the short stop grace of tests/triton_support.py; the stop is not under test here.
    with serving(TritonServer(repo, workdir=tmp_path / "wd", model_name="bls", auto_ports=True)) as server:
        before = python_stubs(server.pid)
        failures: list[str] = []

        def client(k: int) -> None:
            with httpx.Client(timeout=120) as c:
                for _ in range(k):
                    r = c.post(f"{server.http_url}/v2/models/bls/generate", json={"N": [200]})
                    if r.status_code != 200 or len(r.json()["OUT"]) != 200:
                        failures.append(r.text[:200])

        threads = [threading.Thread(target=client, args=(20,)) for _ in range(3)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        assert failures == []
        assert set(before) == {"bls", "echo"}
        assert python_stubs(server.pid) == before  # no stub died or was replaced
