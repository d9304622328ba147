"""The one subprocess runner: argv only, stdin closed, tee to log, rc checked, group killed."""

from __future__ import annotations

import os
import sys
import time

import pytest

from toolkit.errors import StepFailed, ToolNotFound
from toolkit.runner import run


def test_tees_output_and_returns(tmp_path):
    r = run([sys.executable, "-c", "print('hello'); import sys; print('err', file=sys.stderr)"], step="greet",
            log_dir=tmp_path / "logs")
    assert r.returncode == 0
    log = (tmp_path / "logs" / "greet.log").read_text()
    assert "hello" in log and "err" in log and log.startswith("$ ")
    assert "hello" in r.tail


def test_nonzero_raises_with_log(tmp_path):
    with pytest.raises(StepFailed) as e:
        run([sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"], step="fail", log_dir=tmp_path)
    assert e.value.returncode == 3 and e.value.log_path == tmp_path / "fail.log"
    assert "boom" in e.value.tail


def test_stdin_is_closed(tmp_path):
    # A child reading stdin gets EOF at once instead of hanging.
    r = run([sys.executable, "-c", "import sys; print(repr(sys.stdin.read()))"], step="stdin", timeout=20)
    assert "''" in r.tail


def test_missing_tool():
    with pytest.raises(ToolNotFound):
        run(["definitely-not-a-tool-sdtk"], step="x", hint="install it")


def test_timeout_kills_the_whole_group(tmp_path):
    pidfile = tmp_path / "child.pid"
    code = (
        "import subprocess, sys, time;"
        f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid));"
        "time.sleep(60)"
    )
    start = time.monotonic()
    with pytest.raises(StepFailed, match="exit code -9"):
        run([sys.executable, "-c", code], step="slow", timeout=2)
    assert time.monotonic() - start < 20
    child = int(pidfile.read_text())
    for _ in range(50):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("grandchild survived")


def test_token_is_redacted(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secretvalue123")
    run([sys.executable, "-c", "print('hf_secretvalue123')"], step="tok", log_dir=tmp_path)
    assert "hf_secretvalue123" not in (tmp_path / "tok.log").read_text()
