"""Which tmux pane shows a node, for the dashboard's open-pane key (the same refusal
as ``fractal node attach``: only an active node has a pane)."""

from __future__ import annotations

from pathlib import Path

from fractal import tmux
from fractal.errors import FractalError
from fractal.tree import Tree


def pane_of(tree: Tree, branch: str) -> tuple[str, Path]:
    """The tmux session and socket of ``branch``'s live pane. Raises FractalError when
    the node is not active with a session (naming its transcript)."""
    from fractal.store import reader  # deferred: start-up cost (17 modules)

    row = reader.node_row(tree.db_path, branch)
    if row is None or row.status != "active" or not row.tmux_session:
        status = row.status if row else "unregistered"
        raise FractalError(f"node {branch} is {status}; only an active node has a pane "
                           f"(its transcript: {tree.node(branch).pane_log})")
    return row.tmux_session, Path(row.tmux_socket or tmux.socket_path())


def switch_to(tree: Tree, branch: str) -> bool:
    """Switch this terminal's tmux client to the node's pane when running inside tmux;
    False when there is no client to switch (the caller attaches instead)."""
    session, socket = pane_of(tree, branch)
    return tmux.switch_client(session, socket)


def attach_here(tree: Tree, branch: str) -> int:
    """Attach a tmux client to the node's pane in this terminal until it detaches."""
    session, socket = pane_of(tree, branch)
    return tmux.attach_foreground(session, socket)
