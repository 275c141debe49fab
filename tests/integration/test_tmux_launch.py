"""tmux.launch as one tmux client: the pane's pid, its environment, the refusal of a
duplicate, and ``remain-on-exit`` off even where the server's global option is on."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from fractal import tmux
from fractal.errors import TmuxError
from fractal.tmux import Liveness
from tests.helpers import wait_until

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")


@pytest.fixture
def sock() -> Iterator[Path]:
    """A fresh socket path (short enough for sun_path) on a server killed at teardown."""
    path = Path(os.environ["TMUX_TMPDIR"]) / f"l-{uuid.uuid4().hex[:8]}" / "default"
    yield path
    tmux.kill_server(path)


def test_launch_returns_the_pane_pid_and_sets_the_environment(sock: Path,
                                                              tmp_path: Path) -> None:
    out = tmp_path / "env.txt"
    pid = tmux.launch("fxl-a", ["sh", "-c", f'echo "$FXL_VALUE $$" > {out}; sleep 30'],
                      cwd=tmp_path, socket=sock, env={"FXL_VALUE": "it is set"})
    assert tmux.pane_pid("fxl-a", sock) == pid
    text = wait_until(lambda: out.read_text() if out.exists() and out.read_text() else None)
    assert text.split()[:3] == ["it", "is", "set"]
    with pytest.raises(TmuxError, match="already exists"):
        tmux.launch("fxl-a", ["sleep", "1"], cwd=tmp_path, socket=sock)


def test_the_session_ends_with_its_command_whatever_the_global_option(
        sock: Path, tmp_path: Path) -> None:
    tmux.launch("fxl-keep", ["sleep", "30"], cwd=tmp_path, socket=sock)
    subprocess.run(["tmux", "-S", str(sock), "set-option", "-g", "remain-on-exit", "on"],
                   check=True)
    tmux.launch("fxl-quick", ["true"], cwd=tmp_path, socket=sock)
    wait_until(lambda: tmux.probe("fxl-quick", sock) is Liveness.GONE)
    assert tmux.probe("fxl-keep", sock) is Liveness.ALIVE


def test_a_launch_that_meets_an_exiting_server_starts_a_new_one(
        sock: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first client reaches a server as it exits (what a fake tmux prints then, once);
    the launch tries again and the session runs."""
    real = shutil.which("tmux")
    assert real is not None
    once = tmp_path / "failed-once"
    fake = tmp_path / "bin" / "tmux"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\ncase " $* " in *" new-session "*)\n'
                    f'  if [ ! -e {once} ]; then : > {once}; '
                    f'echo "server exited unexpectedly" >&2; exit 1; fi;;\nesac\n'
                    f'exec {real} "$@"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    pid = tmux.launch("fxl-x", ["sleep", "30"], cwd=tmp_path, socket=sock)
    assert once.exists() and tmux.pane_pid("fxl-x", sock) == pid
    assert tmux.probe("fxl-x", sock) is Liveness.ALIVE
