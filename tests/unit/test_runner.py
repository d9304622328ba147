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


def test_spawn_logs_the_command_and_kill_group_ends_the_group(tmp_path):
    import subprocess
    import sys
    import time

    from toolkit.runner import kill_group, spawn
    from toolkit.server import procs

    log = tmp_path / "logs" / "server.log"
    # A leader that ignores SIGTERM and a child in its group: kill_group must SIGKILL both.
    code = (
        "import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); print('re' + 'ady', flush=True); "
        "time.sleep(60)"
    )
    proc = spawn([sys.executable, "-c", code], log_path=log, cwd=tmp_path)
    for _ in range(400):  # the command line itself is in the log: wait for the printed line
        if "ready" in log.read_text().splitlines()[1:] or proc.poll() is not None:
            break
        time.sleep(0.05)
    assert log.read_text().splitlines()[0].startswith("$ " + sys.executable)
    assert len(procs.group_members(proc.pid)) == 2
    kill_group(proc, grace=0.5, leader_only=True)
    assert proc.returncode == -9
    procs.kill_group_now(proc.pid)
    assert procs.group_members(proc.pid) == []
    assert isinstance(proc, subprocess.Popen)


def test_spawn_and_capture_report_missing_tools(tmp_path):
    import pytest

    from toolkit.errors import StepFailed, ToolNotFound
    from toolkit.runner import capture, spawn

    with pytest.raises(ToolNotFound, match="no-such-tool"):
        spawn(["no-such-tool"], log_path=tmp_path / "x.log", hint="install it")
    with pytest.raises(ToolNotFound):
        capture(["no-such-tool"], step="q", timeout=5)
    assert capture(["echo", "a,b"], step="q", timeout=5) == "a,b\n"
    with pytest.raises(StepFailed) as ei:
        capture(["sh", "-c", "echo oops >&2; exit 3"], step="q", timeout=5)
    assert ei.value.returncode == 3 and "oops" in ei.value.tail


def test_every_subprocess_goes_through_the_runner():
    import re
    from pathlib import Path

    import toolkit

    root = Path(toolkit.__file__).parent
    pattern = re.compile(r"subprocess\.(run|Popen|call|check_call|check_output)\(|os\.(system|popen)\(")
    offenders = [
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if p.name != "runner.py" and pattern.search(p.read_text(encoding="utf-8"))
    ]
    assert offenders == []
