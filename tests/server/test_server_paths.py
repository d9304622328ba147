"""Paths Triton's Python backend cannot start stubs from.

python_backend r24.10 (Triton 2.51) starts every stub with `bash -c` on its paths unquoted, so a
workdir with a space or a quote never gets its stubs (`bash: …: No such file or directory`, and
Triton waits for them), and the stub's Python reads paths as ASCII (`UnicodeEncodeError`). sdtk
refuses such paths before launching anything, and should one get through anyway, it reads the
stub's failure in the log within seconds instead of waiting out the ready timeout.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from toolkit.errors import WorkdirError
from toolkit.server import launch
from toolkit.server.launch import ServerStartError, TritonServer

from .conftest import processes_mentioning

pytestmark = pytest.mark.tritonserver
ROOT = Path(__file__).resolve().parents[2]
OK = dict(decoupled=True, max_batch_size=8)


@pytest.mark.parametrize("name", ["with space", "it's", 'q"uote', "dollar$HOME", "café"])
def test_unlaunchable_paths_are_refused_before_launch(make_repo, tmp_path, name):
    repo = make_repo({"ensemble": OK})
    server = TritonServer(repo, workdir=tmp_path / name / "wd", auto_ports=True)
    with pytest.raises(WorkdirError) as ei:
        server.start()
    assert "cannot start its stubs from" in str(ei.value) and "stub_launcher.cc" in ei.value.hint
    assert server.pid is None and not (tmp_path / name / "wd" / "logs").exists()


def test_deploy_refuses_an_unlaunchable_workdir_before_building(tmp_path):
    workdir = tmp_path / "my models"
    r = subprocess.run(
        [sys.executable, "-m", "toolkit.cli", "deploy", str(ROOT / "recipes" / "tiny-ngram.yaml"),
         "--workdir", str(workdir), "--detach", "--auto-ports", "--no-validate"],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, cwd=ROOT,
    )  # fmt: skip
    assert r.returncode == 1, r.stderr
    assert "cannot start its stubs from: ' '" in r.stderr and "Traceback" not in r.stderr
    assert not workdir.exists()  # nothing built, rendered or locked


def test_a_stub_bash_cannot_start_fails_within_seconds(make_repo, tmp_path, monkeypatch):
    """The guard switched off (what an older sdtk, or a hand-made launch, would do): the log shows
    bash failing on the split path and the start fails at once, not after the ready timeout."""
    monkeypatch.setattr(launch, "check_launch_path", lambda path, what: None)
    repo = make_repo({"ensemble": OK})
    server = TritonServer(repo, workdir=tmp_path / "with space", auto_ports=True)
    t0 = time.monotonic()
    with pytest.raises(ServerStartError) as ei:
        server.start(ready_timeout=120)
    assert time.monotonic() - t0 < 60  # Triton itself would wait for the stub far longer
    e = ei.value
    assert e.reason == "stub_failed" and "No such file or directory" in str(e), str(e)
    assert "bash -c" in e.hint
    assert processes_mentioning(str(tmp_path)) == []
