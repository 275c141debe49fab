"""The pane's argv goes straight to the supervisor (``fractal/__main__.py``); any other
form of ``node _run`` is left to click, which parses it and reports its errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from fractal.__main__ import pane_options


@pytest.mark.parametrize(("tail", "expected"), [
    ([], (False, False)),
    (["--continue"], (True, False)),
    (["--resume"], (False, True)),
    (["--continue", "--resume"], (True, True)),
    (["--resume", "--continue"], None),  # another order: click's to parse
    (["--continue", "--continue"], None),
    (["--clean"], None),
    (["extra"], None),
])
def test_pane_argv(tmp_path: Path, tail: list[str], expected: tuple[bool, bool] | None) -> None:
    got = pane_options(["node", "_run", "--path", str(tmp_path), *tail])
    assert got == (None if expected is None else (tmp_path, *expected))


@pytest.mark.parametrize("args", [
    [],
    ["node"],
    ["node", "_run"],
    ["node", "_run", "--path"],
    ["node", "status", "--path", "."],
    ["node", "_run", "--path=."],
    ["node", "_run", "--continue", "--path", "."],
    ["--help"],
])
def test_other_argv_goes_to_click(args: list[str]) -> None:
    assert pane_options(args) is None


def test_a_path_that_is_no_directory_goes_to_click(tmp_path: Path) -> None:
    """click's path check refuses a file and accepts a missing path: both are its call."""
    (tmp_path / "file").write_text("x")
    for path in (tmp_path / "file", tmp_path / "missing"):
        assert pane_options(["node", "_run", "--path", str(path)]) is None
