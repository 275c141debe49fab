"""The tests' CLI fork server (``tests/cliserver.py``) answers as a fresh interpreter does:
the same streams and exit codes as ``python -m fractal``, the caller's cwd, environment and
stdin, and a timeout that leaves nothing running."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests import cliserver
from tests.helpers import make_repo, wait_until

pytestmark = pytest.mark.skipif(not cliserver.ENABLED, reason="FRACTAL_TEST_CLI_SERVER=0")


def _plain(args: list[str], cwd: Path, env: dict[str, str] | None = None
           ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fractal", *args], cwd=cwd, text=True,
                          capture_output=True, env=env or dict(os.environ),
                          stdin=subprocess.DEVNULL, timeout=60, check=False)


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["nope"], ["node", "status", "x"],
                                  ["node", "init", "--bogus-flag"]],
                         ids=["version", "help", "unknown-command", "refusal", "bad-option"])
def test_a_forked_call_prints_and_exits_as_a_fresh_interpreter(tmp_path: Path,
                                                                args: list[str]) -> None:
    forked = cliserver.run(args, tmp_path, env=dict(os.environ), timeout=60)
    plain = _plain(args, tmp_path)
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        plain.returncode, plain.stdout, plain.stderr)


def test_the_call_runs_in_the_callers_cwd_with_the_callers_environment(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    made = cliserver.run(["init"], repo, env=dict(os.environ), timeout=60)
    assert made.returncode == 0, made.stderr
    assert (repo / ".fractal" / "main" / "fractal.db").exists()
    narrow, wide = ({**os.environ, "COLUMNS": width} for width in ("40", "200"))
    helps = [cliserver.run(["--help"], repo, env=env, timeout=60).stdout for env in (narrow, wide)]
    assert helps[0] != helps[1]  # click wraps the help to COLUMNS: the call read ours
    assert helps == [_plain(["--help"], repo, env=env).stdout for env in (narrow, wide)]


def test_stdin_is_the_input_given_and_empty_without_one(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    assert cliserver.run(["init"], repo, env=dict(os.environ), timeout=60).returncode == 0
    assert cliserver.run(["node", "init", "a"], repo, env=dict(os.environ),
                         timeout=60).returncode == 0
    worktree = repo / ".worktrees" / "main.a"
    send = ["radio", "send", "-", "--parent", "--subject", "s", "--priority", "3"]
    sent = cliserver.run(send, worktree, env=dict(os.environ), timeout=60, input="from stdin\n")
    assert sent.returncode == 0, sent.stderr
    body = cliserver.run(["radio", "read"], repo, env=dict(os.environ), timeout=60)
    assert "from stdin" in body.stdout
    empty = cliserver.run(send, worktree, env=dict(os.environ), timeout=60)
    plain = _plain(send, worktree)
    assert (empty.returncode, empty.stderr) == (plain.returncode, plain.stderr)


def test_a_call_past_its_timeout_is_killed_and_raises(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    assert cliserver.run(["init"], repo, env=dict(os.environ), timeout=60).returncode == 0
    with pytest.raises(subprocess.TimeoutExpired):
        cliserver.run(["node", "activity", "--follow"], repo, env=dict(os.environ), timeout=2)
    server = psutil.Process(cliserver._server().proc.pid)  # type: ignore[union-attr]
    wait_until(lambda: not server.children(), timeout=10, message="the timed-out call is gone")
