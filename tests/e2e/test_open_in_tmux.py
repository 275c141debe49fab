"""``fractal open`` in a real tmux pane: keys sent with ``send-keys``, the screen read
back with ``capture-pane``."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fractal import tmux
from tests.e2e.conftest import Tree
from tests.helpers import wait_until

pytestmark = pytest.mark.e2e


@dataclass(frozen=True)
class Dashboard:
    """``fractal open`` running in session ``dash`` of a tmux server of its own."""

    socket: Path

    def screen(self) -> str:
        """The pane's visible text; ``""`` while there is no pane to read."""
        try:
            return tmux.capture_pane("dash", self.socket)
        except Exception:
            return ""

    def keys(self, *names: str) -> None:
        """Type ``names`` (tmux key names) into the pane."""
        subprocess.run(["tmux", "-S", str(self.socket), "send-keys", "-t", "=dash:", *names],
                       check=True, capture_output=True)


@contextlib.contextmanager
def _dashboard(tree: Tree) -> Iterator[Dashboard]:
    """``fractal open`` on ``tree`` in a true-colour terminal on a private tmux server,
    killed (the server, and so the pane) on the way out."""
    sock = Path(os.environ["TMUX_TMPDIR"]) / f"o-{uuid.uuid4().hex[:8]}" / "default"
    env = {"TERM": "xterm-256color", "COLORTERM": "truecolor"}
    try:
        tmux.launch("dash", [sys.executable, "-m", "fractal", "open"], cwd=tree.repo,
                    socket=sock, env=env)
        yield Dashboard(sock)
    finally:
        tmux.kill_server(sock)


def test_open_draws_the_tree_answers_keys_and_quits(tree: Tree) -> None:
    tree.node("lexer", {"01-A.md": "x"}, "--title", "tokens")
    with _dashboard(tree) as dash:
        screen, keys = dash.screen, dash.keys
        wait_until(lambda: "lexer" in screen() and "inbox" in screen(), timeout=30,
                   message=f"the dashboard drawn: {screen()!r}")
        assert "nothing waits for you" in screen()
        keys("?")
        wait_until(lambda: "fractal open — keys" in screen(), timeout=15, message="help")
        keys("Escape")
        wait_until(lambda: "fractal open — keys" not in screen(), timeout=15,
                   message="help closed")
        keys("Down")
        wait_until(lambda: "tokens" in screen(), timeout=15, message="the node's card")
        keys("q")
        wait_until(lambda: tmux.probe("dash", dash.socket) is tmux.Liveness.GONE, timeout=15,
                   message="the app quit and the pane ended")


def test_open_refuses_without_a_terminal(tree: Tree) -> None:
    out = tree.cli("open", check=False)
    assert out.returncode == 1
    assert "needs a terminal" in out.stderr


def test_open_starts_on_the_first_node_and_every_card_names_its_agent(tree: Tree) -> None:
    """No key pressed: the first node is selected (its card drawn, not `no node
    selected`); each node's card names the agent setting it runs with, the same way for
    an idle node as for one that runs."""
    tree.node("alpha", {"01-A.md": "x"}, "--title", "first one", "--agent", "codex")
    tree.node("beta", {"01-A.md": "[stub:hang]"}, "--title", "second one", "--no-sync")
    tree.cli("node", "start", "beta")
    default = str(tree.agent)  # the tree's default (a long path: the card wraps it)
    try:
        with _dashboard(tree) as dash:
            screen = dash.screen
            wait_until(lambda: "first one" in screen(), timeout=30,
                       message="the first node's card at start")
            assert "no node selected" not in screen()
            assert "agent codex · model" in screen()
            dash.keys("Down")
            wait_until(lambda: "second one" in screen(), timeout=30,
                       message="the running node's card")
            assert f"{default.rpartition('/')[2]} · model" in screen()  # the tree's, as it runs
    finally:
        tree.cli("node", "kill", "beta", check=False)
