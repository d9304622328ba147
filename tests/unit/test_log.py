"""toolkit.log and toolkit.progress: step messages go to `sdtk.*` loggers; only the CLI installs a
handler (stderr); counted work gets rich bars."""

from __future__ import annotations

import logging

from click.testing import CliRunner

from toolkit import log, progress
from toolkit.cli import cli


def test_progress_logs_under_sdtk(caplog):
    with caplog.at_level(logging.INFO, logger="sdtk"):
        progress.steps("deploy")("rendering the repository")
    assert [(r.name, r.getMessage()) for r in caplog.records] == [("sdtk.deploy", "rendering the repository")]


def test_cli_installs_one_stderr_handler(capsys):
    runner = CliRunner()
    for _ in range(2):
        assert runner.invoke(cli, ["recipes", "list", "--json"]).exit_code == 0
    handlers = [h for h in logging.getLogger("sdtk").handlers if isinstance(h, log._StderrHandler)]
    assert len(handlers) == 1
    progress.steps("build")("preflight: 3 passed")
    captured = capsys.readouterr()
    assert captured.err == "sdtk build: preflight: 3 passed\n" and captured.out == ""


def test_plan_steps_go_through_the_same_handler(capsys):
    """bench's plan/tune messages are steps too (were bare prints with their own prefix)."""
    from toolkit.bench.options import RunOptions

    log.install_handler()
    RunOptions(progress=True).steps("plan")("timing forwards")
    RunOptions(progress=False).steps("plan")("not shown")
    assert capsys.readouterr().err == "sdtk plan: timing forwards\n"


def test_bars_disabled_do_nothing(capsys):
    bars = progress.Bars(False, "stress")
    with bars:
        bars.level("c=4", 3)
        bars.advance(1)
    assert bars.bar is None and capsys.readouterr().err == ""
