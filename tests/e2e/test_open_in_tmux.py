"""``fractal open`` in a real tmux pane: keys sent with ``send-keys``, the screen read
back with ``capture-pane``."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from fractal import tmux
from tests.e2e.conftest import Tree
from tests.helpers import wait_until

pytestmark = pytest.mark.e2e


def test_open_draws_the_tree_answers_keys_and_quits(tree: Tree) -> None:
    tree.node("lexer", {"01-A.md": "x"}, "--title", "tokens")
    sock = Path(os.environ["TMUX_TMPDIR"]) / f"o-{uuid.uuid4().hex[:8]}" / "default"
    env = {"TERM": "xterm-256color", "COLORTERM": "truecolor"}
    try:
        tmux.launch("dash", [sys.executable, "-m", "fractal", "open"], cwd=tree.repo,
                    socket=sock, env=env)

        def screen() -> str:
            try:
                return tmux.capture_pane("dash", sock)
            except Exception:
                return ""

        wait_until(lambda: "lexer" in screen() and "inbox" in screen(), timeout=30,
                   message=f"the dashboard drawn: {screen()!r}")
        assert "nothing waits for you" in screen()

        def keys(*names: str) -> None:
            subprocess.run(["tmux", "-S", str(sock), "send-keys", "-t", "=dash:", *names],
                           check=True, capture_output=True)

        keys("?")
        wait_until(lambda: "fractal open — keys" in screen(), timeout=15, message="help")
        keys("Escape")
        wait_until(lambda: "fractal open — keys" not in screen(), timeout=15,
                   message="help closed")
        keys("Down")
        wait_until(lambda: "tokens" in screen(), timeout=15, message="the node's card")
        keys("q")
        wait_until(lambda: tmux.probe("dash", sock) is tmux.Liveness.GONE, timeout=15,
                   message="the app quit and the pane ended")
    finally:
        tmux.kill_server(sock)


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
    sock = Path(os.environ["TMUX_TMPDIR"]) / f"o-{uuid.uuid4().hex[:8]}" / "default"
    env = {"TERM": "xterm-256color", "COLORTERM": "truecolor"}
    try:
        tmux.launch("dash", [sys.executable, "-m", "fractal", "open"], cwd=tree.repo,
                    socket=sock, env=env)

        def screen() -> str:
            try:
                return tmux.capture_pane("dash", sock)
            except Exception:
                return ""

        wait_until(lambda: "first one" in screen(), timeout=30,
                   message="the first node's card at start")
        assert "no node selected" not in screen()
        assert "agent codex · model" in screen()
        subprocess.run(["tmux", "-S", str(sock), "send-keys", "-t", "=dash:", "Down"],
                       check=True, capture_output=True)
        wait_until(lambda: "second one" in screen(), timeout=30,
                   message="the running node's card")
        assert f"{default.rpartition('/')[2]} · model" in screen()  # the tree's, as it runs
    finally:
        tmux.kill_server(sock)
        tree.cli("node", "kill", "beta", check=False)
