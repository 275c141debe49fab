"""The lazily loaded command groups answer a mistyped name as the loaded ones did: exit
2 and the close names among all their commands, the unloaded ones included."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from fractal.cli import cli


@pytest.mark.parametrize(("args", "wrong", "hint"), [
    (("node", "stopp"), "stopp", "Did you mean 'stop'?"),
    (("node", "merg"), "merg", "Did you mean 'merge'?"),
    (("node", "mrege"), "mrege", "Did you mean 'merge'?"),
    (("node", "pend"), "pend", "Did you mean 'pending'?"),
    (("node", "del"), "del", "Did you mean 'delete'?"),
    (("node", "conf"), "conf", "(Did you mean one of: 'config', 'conflicts'?)"),
    (("node", "st"), "st", "(Did you mean one of: 'cost', 'list', 'stop'?)"),
    (("nod",), "nod", "Did you mean 'node'?"),
    (("radi", "x"), "radi", "Did you mean 'radio'?"),
], ids=lambda v: " ".join(v) if isinstance(v, tuple) else "-")
def test_a_mistyped_command_names_the_close_ones(args: tuple[str, ...], wrong: str,
                                                 hint: str) -> None:
    result = CliRunner().invoke(cli, list(args), prog_name="fractal")
    assert result.exit_code == 2
    assert result.output.splitlines()[-1] == f"Error: No such command '{wrong}'. {hint}"


def test_a_name_near_nothing_gets_no_hint() -> None:
    result = CliRunner().invoke(cli, ["node", "zzzzzz"], prog_name="fractal")
    assert result.exit_code == 2
    assert result.output.splitlines()[-1] == "Error: No such command 'zzzzzz'."
