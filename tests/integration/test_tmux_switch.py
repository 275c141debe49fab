"""``tmux.attach`` from inside a tmux session switches the client that shows it.

A real client: a pane of a second tmux server runs ``tmux attach`` to the first, so the
first server has a client (that pane's tty) showing session ``home``. A process that
says it runs in ``home``'s pane ($TMUX, $TMUX_PANE) and attaches to ``work`` moves that
client to ``work`` and returns, exit 0.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from fractal import tmux
from tests.helpers import wait_until

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")

LONG = ["sh", "-c", "exec sleep 300"]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def socks() -> Iterator[tuple[Path, Path]]:
    base = Path(os.environ["TMUX_TMPDIR"]) / f"w-{uuid.uuid4().hex[:8]}"
    pair = (base / "a", base / "b")
    yield pair
    for sock in pair:
        tmux.kill_server(sock)


def _t(sock: Path, *args: str) -> str:
    return subprocess.run(["tmux", "-S", str(sock), *args], capture_output=True, text=True,
                          check=False, timeout=10).stdout.strip()


def test_attach_inside_tmux_switches_the_client(socks: tuple[Path, Path],
                                                tmp_path: Path) -> None:
    server, viewer = socks
    tmux.launch("home", LONG, cwd=tmp_path, socket=server)
    tmux.launch("work", LONG, cwd=tmp_path, socket=server)
    env = {k: v for k, v in os.environ.items() if k != "TMUX"}
    tmux.launch("view", ["tmux", "-S", str(server), "attach-session", "-t", "=home"],
                cwd=tmp_path, socket=viewer, env={"TERM": "xterm"})
    wait_until(lambda: _t(server, "list-clients", "-F", "#{session_name}") == "home",
               timeout=10, message="a client shows home")
    pane = _t(server, "list-panes", "-t", "=home:", "-F", "#{pane_id}")
    code = ("from pathlib import Path; from fractal import tmux; "
            f"tmux.attach('work', Path({str(server)!r})); print('switched')")
    env.update({"PYTHONPATH": str(ROOT), "TMUX": f"{server},1,0", "TMUX_PANE": pane})
    out = subprocess.run([sys.executable, "-c", code], env=env, stdin=subprocess.DEVNULL,
                         capture_output=True, text=True, timeout=30, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "switched"
    assert "no current client" not in out.stderr
    wait_until(lambda: _t(server, "list-clients", "-F", "#{session_name}") == "work",
               timeout=10, message="the client now shows work")
