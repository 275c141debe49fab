"""``fractal usage``: the tree's usage windows, and the operator's way to reopen one.

A window belongs to a credential, named by its 16-hex fingerprint
(``domain.usage.windows.credential_key``); ``usage list`` prints them. ``usage reopen`` moves a
closed window's wake instant to now (``store.windows.Windows.wake_now``) and nudges every
active node, so a node waiting on that window claims the probe at once: its launch
reopens the window for the others when it gets through, or closes it again with the
reset the CLI states. Only the operator may reopen (``domain.authority.RULES``); each
reopening is a ``usage_reopen`` event on the tree's root.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from fractal.control import wake_node
from fractal.domain.states import Status
from fractal.domain.usage.windows import WindowRow, WindowState, utc_label
from fractal.errors import FractalError
from fractal.lifecycle.context import Context
from fractal.store.registry import Registry
from fractal.store.windows import Windows

__all__ = ["REOPEN_EVENT", "Reopened", "reopen", "windows"]

REOPEN_EVENT = "usage_reopen"
"""The event an operator's reopening records on the tree's root."""


@dataclass(frozen=True)
class Reopened:
    """What ``reopen`` did: the window ``before`` it, whether it moved the wake instant
    (``changed``: False for a window already open or being probed) and the active nodes
    it nudged (``woken``)."""

    before: WindowRow
    changed: bool
    woken: tuple[str, ...] = ()


def windows(ctx: Context) -> list[WindowRow]:
    """Every credential's usage window in the context's tree, by credential."""
    return Windows(ctx.tree.db_path).windows()


def _match(rows: list[WindowRow], credential: str) -> WindowRow:
    """The row whose credential is ``credential`` or starts with it. Raises FractalError
    naming the known credentials when none or several match."""
    exact = [r for r in rows if r.credential == credential]
    found = exact or ([r for r in rows if r.credential.startswith(credential)]
                      if credential else [])
    if len(found) == 1:
        return found[0]
    known = ", ".join(r.credential for r in rows) or "none"
    if not found:
        raise FractalError(f"no usage window for credential {credential!r} in this tree "
                           f"(known: {known}); `fractal usage list` shows them")
    raise FractalError(f"credential {credential!r} is ambiguous: it begins "
                       f"{', '.join(r.credential for r in found)}; give more of it")


def reopen(ctx: Context, credential: str) -> Reopened:
    """Let the nodes waiting on ``credential``'s closed window probe now.

    ``credential`` is a fingerprint or a prefix naming one window. Raises Refused unless
    the operator at the root asks (a node's loop may not override a window for the whole
    tree), FractalError when no window, or more than one, matches. A window already open
    or being probed is left as it is (``changed`` False) and nothing is recorded.
    """
    tree = ctx.tree
    ctx.authorize("usage reopen", tree.root)
    store = Windows(tree.db_path)
    row = _match(store.windows(), credential)
    before = store.wake_now(row.credential, time.time()) or row
    if before.state is not WindowState.CLOSED:
        return Reopened(before, False)
    woken = tuple(n.node for n in Registry(tree.db_path).nodes()
                  if n.status is Status.ACTIVE and tree.owns(n.node))
    wake_node(tree, *woken)
    ctx.ledger.add_event(tree.root, REOPEN_EVENT, actor=ctx.actor, status="completed",
                         metadata=f"{before.credential} ({before.window}): was closed until "
                                  f"{utc_label(before.wake_at)}; probe now")
    return Reopened(before, True, woken)
