"""The lazily loaded command groups answer a mistyped name as the loaded ones did: exit
2 and the close names among all their commands, the unloaded ones included."""

from __future__ import annotations

from pathlib import Path

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


def test_a_lazy_subcommand_that_cannot_load_is_an_internal_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A fault in a lazily loaded module surfaces when its command runs: exit 3 and one
    stderr line naming the crash log; the group's listing and the other verbs still work."""
    from fractal.cli import main
    from fractal.cli.node import _LAZY

    monkeypatch.chdir(tmp_path)  # no tree here: the log goes to the state dir
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setitem(_LAZY, "merge", ("fractal.cli.no_such_module", "merge_cmd"))
    with pytest.raises(SystemExit) as ended:
        main(["node", "merge", "n"])
    assert ended.value.code == 3
    line = capsys.readouterr().err
    assert line.startswith("Internal error (ModuleNotFoundError: ") and line.count("\n") == 1
    logs = list((tmp_path / "state" / "fractal").glob("crash-*.log"))
    assert len(logs) == 1 and "fractal.cli.no_such_module" in logs[0].read_text()
    listing = CliRunner().invoke(cli, ["node", "--help"], prog_name="fractal")
    assert listing.exit_code == 0 and "  merge " in listing.output


def test_the_listing_stand_ins_are_plain_commands() -> None:
    """``fractal node --help`` lists a lazy command as a bare stand-in: a loaded command
    that click would hide or mark deprecated would be listed differently from it."""
    import importlib

    from fractal.cli.node import _LAZY

    for name, (module, attr) in _LAZY.items():
        loaded = getattr(importlib.import_module(module), attr)
        assert not loaded.hidden and not loaded.deprecated, name
