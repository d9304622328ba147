"""toolkit.log: progress goes to `sdtk.*` loggers; only the CLI installs a handler (stderr)."""

from __future__ import annotations

import logging

from click.testing import CliRunner

from toolkit import log
from toolkit.cli import cli


def test_progress_logs_under_sdtk(caplog):
    with caplog.at_level(logging.INFO, logger="sdtk"):
        log.progress("deploy")("rendering the repository")
    assert [(r.name, r.getMessage()) for r in caplog.records] == [("sdtk.deploy", "rendering the repository")]


def test_cli_installs_one_stderr_handler(capsys):
    runner = CliRunner()
    for _ in range(2):
        assert runner.invoke(cli, ["recipes", "list", "--json"]).exit_code == 0
    handlers = [h for h in logging.getLogger("sdtk").handlers if isinstance(h, log._StderrHandler)]
    assert len(handlers) == 1
    log.progress("build")("preflight: 3 passed")
    captured = capsys.readouterr()
    assert captured.err == "sdtk build: preflight: 3 passed\n" and captured.out == ""
