"""run_capture against real processes: exit codes, merged text, environment, timeout, sweep."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from fractal.domain.run.outcome import EXIT_TIMEOUT
from fractal.errors import SpawnError
from fractal.procs.commands import run_capture
from tests.helpers import SCALE, pid_alive

STUBS = Path(__file__).resolve().parents[1] / "stubs"


@pytest.mark.parametrize(("script", "code", "output"), [
    ("echo out; echo err >&2; exit 3", 3, "out\nerr\n"),
    ("printf 'ok'", 0, "ok"),
    ("printf '\\377ok'", 0, "\ufffdok"),
    ("kill -TERM $$", 143, ""),
], ids=["merged-streams", "no-newline", "bad-utf8", "signal-death"])
def test_exit_code_and_merged_text(script: str, code: int, output: str, tmp_path: Path) -> None:
    assert run_capture(["sh", "-c", script], cwd=tmp_path) == (code, output)


def test_env_none_inherits_and_a_mapping_replaces(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FRACTAL_CAPTURE_PROBE", "inherited")
    script = 'printf "%s" "${FRACTAL_CAPTURE_PROBE-unset}"'
    assert run_capture(["sh", "-c", script], cwd=tmp_path) == (0, "inherited")
    env = {"PATH": os.environ["PATH"]}
    assert run_capture(["sh", "-c", script], cwd=tmp_path, env=env) == (0, "unset")


def test_runs_in_cwd(tmp_path: Path) -> None:
    assert run_capture(["pwd"], cwd=tmp_path) == (0, f"{tmp_path}\n")


def test_timeout_stops_the_group_and_its_escapees(tmp_path: Path) -> None:
    started = time.monotonic()
    code, output = run_capture([str(STUBS / "proc_setsid_child.sh")], cwd=tmp_path,
                               timeout=1.0 * SCALE, grace=0.3)
    assert code == EXIT_TIMEOUT
    assert time.monotonic() - started < 1.3 + 3.0 * SCALE
    assert not pid_alive(int(output.split()[0]))  # the grandchild in its own session


def test_timeout_kills_a_term_ignoring_group(tmp_path: Path) -> None:
    code, output = run_capture([str(STUBS / "proc_ignore_term.sh")], cwd=tmp_path,
                               timeout=0.3, grace=0.3)
    assert (code, output) == (EXIT_TIMEOUT, "ready\n")


def test_escapee_left_behind_is_swept(tmp_path: Path) -> None:
    code, output = run_capture([str(STUBS / "proc_setsid_child.sh"), "exit"], cwd=tmp_path,
                               grace=0.3)
    assert code == 0
    assert not pid_alive(int(output.split()[0]))


def test_exec_failure_raises_spawn_error(tmp_path: Path) -> None:
    with pytest.raises(SpawnError, match="cannot start"):
        run_capture([str(tmp_path / "missing")], cwd=tmp_path)
