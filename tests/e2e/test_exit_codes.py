"""Exit codes through the installed console script: 0 ok, 1 a refusal, 2 a usage error,
3 an internal error (one stderr line naming the crash log), 130 Ctrl-C, and a closed stdout
pipe is quiet.

A crash is forced from outside the product: the child interpreter gets a
``sitecustomize.py`` (on its ``PYTHONPATH``) that replaces one function with one raising
what ``CRASH_RAISE`` names, so fractal itself carries no test hook.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.helpers import make_repo

pytestmark = pytest.mark.e2e

_SCRIPT = Path(sys.executable).parent / "fractal"

_SITECUSTOMIZE = '''
import os

_RAISE = {"crash": lambda: RuntimeError("forced crash\\nwith a second line"),
          "interrupt": KeyboardInterrupt, "pipe": BrokenPipeError}


def _boom(*args, **kwargs):
    raise _RAISE[os.environ["CRASH_RAISE"]]()


_where = os.environ.get("CRASH_AT")
if _where == "verb":  # after the command found its tree
    import fractal.lifecycle.reads.spending

    fractal.lifecycle.reads.spending.spent = _boom
elif _where == "tree":  # before any tree is known
    import fractal.tree

    fractal.tree.find_tree = fractal.tree.locate = _boom
'''


def _fractal(args: list[str], cwd: Path, env: Mapping[str, str] | None = None,
             ) -> subprocess.CompletedProcess[str]:
    command = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "fractal"]
    return subprocess.run([*command, *args], cwd=cwd, text=True, capture_output=True,
                          env=dict(env or os.environ), timeout=60, check=False)


@pytest.fixture(scope="module")
def small_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = make_repo(tmp_path_factory.mktemp("codes") / "repo")
    for args in (["init", "--agent", "true"], ["node", "init", "n"]):
        assert _fractal(args, repo).returncode == 0
    return repo


def _crash_env(tmp_path: Path, where: str, what: str = "crash") -> dict[str, str]:
    hook = tmp_path / "hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    return {**os.environ, "PYTHONPATH": str(hook), "CRASH_AT": where, "CRASH_RAISE": what,
            "XDG_STATE_HOME": str(tmp_path / "state")}


def _logged_path(stderr: str) -> Path:
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr  # one line, whatever the exception's message holds
    assert lines[0].startswith("Internal error (RuntimeError: forced crash with a second line)")
    return Path(lines[0].split("the traceback is in ", 1)[1].split(" ", 1)[0])


def test_a_crash_after_the_tree_is_known_is_logged_in_the_tree(small_tree: Path,
                                                               tmp_path: Path) -> None:
    shutil.rmtree(small_tree / ".fractal" / "main" / "logs", ignore_errors=True)
    before = subprocess.run(["git", "status", "--porcelain"], cwd=small_tree, text=True,
                            capture_output=True, check=True).stdout  # the project wiki
    proc = _fractal(["node", "cost", "spent", "n"], small_tree, _crash_env(tmp_path, "verb"))
    assert proc.returncode == 3 and proc.stdout == ""
    log = _logged_path(proc.stderr)
    assert log.parent == small_tree / ".fractal" / "main" / "logs"
    assert stat.S_IMODE(log.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    text = log.read_text()
    assert "command: fractal node cost spent n" in text
    assert "Traceback (most recent call last)" in text and "RuntimeError: forced crash" in text
    status = subprocess.run(["git", "status", "--porcelain"], cwd=small_tree, text=True,
                            capture_output=True, check=True)
    assert status.stdout == before  # the log never shows up as a change to commit


def test_a_crash_before_any_tree_is_logged_in_the_state_dir(small_tree: Path,
                                                            tmp_path: Path) -> None:
    proc = _fractal(["node", "cost", "spent", "n"], small_tree, _crash_env(tmp_path, "tree"))
    assert proc.returncode == 3
    log = _logged_path(proc.stderr)
    assert log.parent == tmp_path / "state" / "fractal"
    assert stat.S_IMODE(log.parent.stat().st_mode) == 0o700
    assert "RuntimeError: forced crash" in log.read_text()


@pytest.mark.parametrize(("args", "what", "code", "stderr_start"), [
    (["node", "status", "nosuch"], None, 1, "Error: no node found for 'nosuch'"),
    (["node", "nosuch"], None, 2, "Usage: fractal node"),
    (["node", "cost", "spent", "n"], "interrupt", 130, "\nAborted."),
    (["node", "cost", "spent", "n"], "pipe", 0, ""),
], ids=["refusal", "usage", "ctrl-c", "broken-pipe"])
def test_exit_codes(small_tree: Path, tmp_path: Path, args: list[str], what: str | None,
                    code: int, stderr_start: str) -> None:
    env = _crash_env(tmp_path, "verb", what) if what else None
    proc = _fractal(args, small_tree, env)
    assert proc.returncode == code, proc.stderr
    assert proc.stderr.startswith(stderr_start) and (stderr_start or proc.stderr == "")
    assert not (tmp_path / "state").exists()  # none of these is a crash


def test_a_closed_stdout_pipe_exits_quietly(small_tree: Path) -> None:
    command = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "fractal"]
    proc = subprocess.Popen([*command, "node", "list", "--json"], cwd=small_tree,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before the child has started writing
    stderr = proc.stderr.read()
    assert proc.wait(timeout=60) in (0, 1)  # click's own handling of EPIPE exits 1
    assert stderr == b""
