"""The `--on-failure` policies are named once (toolkit.server.policies): the CLI offers them, the
watchdog of a detached deploy takes all but `none`, and every one has the text deploy prints."""

from __future__ import annotations

import pytest

from toolkit.server.policies import POLICIES, POLICY_TEXT, WATCHDOG_POLICIES


def test_the_cli_offers_the_policies():
    from toolkit.cli import cli

    option = next(p for p in cli.commands["deploy"].params if p.name == "on_failure")
    assert tuple(option.type.choices) == POLICIES == ("restart", "restart-model", "stop", "none")
    assert set(POLICY_TEXT) == set(POLICIES)


def test_the_watchdog_takes_every_policy_but_none(capsys):
    from toolkit.server import watchdog

    assert WATCHDOG_POLICIES == ("restart", "restart-model", "stop")
    with pytest.raises(SystemExit) as e:
        watchdog.main(["/nowhere", "--on-failure", "none"])
    assert e.value.code == 2 and "invalid choice: 'none'" in capsys.readouterr().err
