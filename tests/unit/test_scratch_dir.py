"""The test session's scratch directory (``FRACTAL_TEST_TMPDIR``): odd values."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from tests import conftest


@pytest.fixture
def scratch_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.setenv("TMPDIR", os.environ.get("TMPDIR", tempfile.gettempdir()))
    monkeypatch.setattr(tempfile, "tempdir", tempfile.tempdir)
    return monkeypatch


@pytest.mark.parametrize("value", ["rel/scratch", "./rel2", "rel3/../rel4"])
def test_a_relative_directory_becomes_an_absolute_tmpdir(
        scratch_env: pytest.MonkeyPatch, tmp_path: Path, value: str) -> None:
    scratch_env.chdir(tmp_path)
    scratch_env.setenv(conftest.SCRATCH_ENV, value)
    conftest._move_scratch()
    chosen = Path(os.environ["TMPDIR"])
    assert chosen.is_absolute() and chosen.is_dir()
    assert chosen == (tmp_path / value).resolve()
    os.chdir("/")  # a child elsewhere (git, tmux, an agent) finds the same directory
    assert Path(os.environ["TMPDIR"]).is_dir()


def test_an_empty_value_keeps_the_system_default(scratch_env: pytest.MonkeyPatch) -> None:
    before = os.environ["TMPDIR"]
    scratch_env.setenv(conftest.SCRATCH_ENV, "")
    conftest._move_scratch()
    assert os.environ["TMPDIR"] == before


def test_a_file_is_refused_with_a_message_naming_the_variable(
        scratch_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    file = tmp_path / "a-file"
    file.write_text("")
    scratch_env.setenv(conftest.SCRATCH_ENV, str(file))
    with pytest.raises(pytest.UsageError, match=conftest.SCRATCH_ENV):
        conftest._move_scratch()
