"""The daemon commands exist and say plainly that the daemons are not part of this version."""

from __future__ import annotations

import pytest

from controller.cli import main as controller_main
from kubeletplugin.cli import main as plugin_main


@pytest.mark.parametrize(
    ("main", "word"), [(plugin_main, "node daemon"), (controller_main, "controller")]
)
def test_daemon_command_refuses_to_pretend(main, word, capsys):
    assert main([]) == 2
    assert word in capsys.readouterr().err


@pytest.mark.parametrize("main", [plugin_main, controller_main])
def test_daemon_command_reports_its_version(main, capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert "0.1.0" in capsys.readouterr().out
