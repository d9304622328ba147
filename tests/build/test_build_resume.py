"""Stamped, atomic steps: reruns skip finished work; a killed step is redone, never accepted."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from standins import quiet

from toolkit.build import build
from toolkit.build.steps import INCOMPLETE, STAMP


def _incompletes(root: Path) -> list[Path]:
    return [p for p in root.rglob(f"*{INCOMPLETE}")]


def test_reference_rerun_skips_everything(make_recipe):
    path = make_recipe("draft_target")
    first = build(path, progress=quiet)
    assert [s["status"] for s in first.steps] == ["ran", "ran"]
    second = build(path, progress=quiet)
    assert [s["status"] for s in second.steps] == ["skipped", "skipped"]
    assert [s["stamp"] for s in first.steps] == [s["stamp"] for s in second.steps]


def test_engine_rerun_skips_everything(make_recipe, standins):
    """Stand-in tools: the second build runs no tool at all."""
    path = make_recipe("draft_target", backend="engine")
    build(path, progress=quiet)
    calls = len(standins.calls())
    assert calls == 4
    second = build(path, progress=quiet)
    assert {s["status"] for s in second.steps} == {"skipped"}
    assert len(standins.calls()) == calls


def test_changed_limits_rebuild_only_the_engine(make_recipe, standins):
    """Stand-in tools: max_batch_size changes trtllm-build's argv, not the converter's."""
    build(make_recipe("none", backend="engine"), progress=quiet)
    limits = {"max_batch_size": 4, "max_input_len": 64, "max_seq_len": 128, "max_num_tokens": 256}
    r = build(make_recipe("none", backend="engine", build=limits), progress=quiet)
    assert [s["status"] for s in r.steps] == ["skipped", "ran"]


def test_changed_input_files_rerun(make_recipe, models, tmp_path):
    import shutil

    ckpt = tmp_path / "ckpt"
    shutil.copytree(models["target"], ckpt)
    path = tmp_path / "r.yaml"
    path.write_text(f"backend: reference\nmodels:\n  target: {ckpt}\n")
    build(path, progress=quiet)
    (ckpt / "generation_config.json").write_text("{}")
    r = build(path, progress=quiet)
    assert [s["status"] for s in r.steps] == ["ran"]


def test_output_without_stamp_is_not_accepted(make_recipe, standins):
    """Stand-in tools: an engine dir left by someone else (no stamp) is rebuilt, not trusted."""
    path = make_recipe("none", backend="engine")
    r = build(path, progress=quiet)
    eng = Path(r.outputs["target"])
    (eng / STAMP).unlink()
    (eng / "rank0.engine").write_bytes(b"garbage")
    again = build(path, progress=quiet)
    assert [s["status"] for s in again.steps] == ["skipped", "ran"]
    assert (eng / "rank0.engine").read_bytes() == b"half-written"  # the stand-in's, freshly written
    assert json.loads((eng / STAMP).read_text())["step"] == "build-target"


def test_kill_mid_step_then_rerun(make_recipe, standins, tmp_path):
    """Stand-in trtllm-build that sleeps: SIGKILL the build mid-step (and the orphaned tool), then
    rerun: the half-written engine is not accepted, the rerun completes, nothing *.incomplete stays."""
    path = make_recipe("none", backend="engine")
    wd = tmp_path / "wd"
    started = tmp_path / "started"
    env = {**standins.env(), "STANDIN_SLEEP_BUILD": "60", "STANDIN_STARTED": str(started),
           "SDTK_STANDIN_LOG": str(standins.log), "TRTLLM_EXAMPLES_DIR": str(standins.examples)}  # fmt: skip
    code = (
        "import sys; from toolkit.build import build; "
        f"build({str(path)!r}, workdir={str(wd)!r}, progress=lambda m: print(m, file=sys.stderr))"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not (started.exists() and started.read_text().startswith("trtllm-build ")):
            assert proc.poll() is None, proc.communicate()[1].decode()
            assert time.monotonic() < deadline, "the stand-in trtllm-build never started"
            time.sleep(0.05)
        tool_pid = int(started.read_text().split()[1])
        proc.kill()  # SIGKILL: no finally, no cleanup
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    with contextlib.suppress(ProcessLookupError):
        os.kill(tool_pid, signal.SIGKILL)  # the orphaned stand-in (its own session), by pid
    root = wd / path.stem
    half = root / "engines" / f"target{INCOMPLETE}"
    assert half.is_dir() and (half / "rank0.engine").exists()
    assert not (root / "engines" / "target").exists()
    assert (root / "checkpoints" / "target" / STAMP).exists()  # the convert step had finished

    r = build(path, workdir=wd, progress=quiet)
    assert [s["status"] for s in r.steps] == ["skipped", "ran"]
    assert not _incompletes(root)
    assert json.loads((root / "engines" / "target" / "config.json").read_text())["standin"] == "trtllm-build"


def test_failed_step_leaves_no_incomplete(make_recipe, standins, monkeypatch):
    """Stand-in trtllm-build replaced by one that fails: StepFailed with the log; output cleaned up."""
    import pytest

    from toolkit.errors import StepFailed

    (standins.bin / "trtllm-build").write_text(
        f"#!{sys.executable}\nimport sys\nprint('boom')\nsys.exit(3)\n"
    )
    path = make_recipe("none", backend="engine")
    with pytest.raises(StepFailed) as e:
        build(path, progress=quiet)
    assert e.value.returncode == 3 and "boom" in e.value.tail
    root = Path.cwd() / "workdir" / path.stem
    assert e.value.log_path == root / "logs" / "build-target.log"
    assert not _incompletes(root) and not (root / "engines" / "target").exists()
