"""``fractal node activity --follow``: the newest rows, then every new row as it lands.

A poll, not a busy loop: the database files' (mtime, size) token is read every
FOLLOW_POLL_S seconds (a ``stat``, no connection) and the view is queried only when it
changed. Each query reaches LAG_S seconds behind the newest row shown (another writer's
clock may trail this one's by a little) and rows already shown are remembered by identity,
so a row is printed once.

Following one node ends once its run is over: when the node, seen ``active`` while
followed, is no longer ``active`` (completed, stopped, exited, killed, or parked
``paused``), its last rows are yielded and the iteration stops. The whole tree (no node
named at the root) is followed until the caller stops.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from fractal.domain.states import Status
from fractal.lifecycle.context import Context
from fractal.lifecycle.heal import heal_all
from fractal.lifecycle.reads.nodes import activity_row
from fractal.store.rows import ActivityRow

FOLLOW_POLL_S = 0.5
"""Seconds between two looks at the database files while following."""
LAG_S = 5.0
"""How far behind the newest shown row each query reaches (seconds)."""


def _behind(timestamp: str, seconds: float) -> str:
    from datetime import timedelta  # deferred: start-up cost (3 modules)

    from fractal.store.timefmt import format_ts, parse_ts  # deferred: start-up cost (4 modules)

    return format_ts(parse_ts(timestamp) - timedelta(seconds=seconds))


def _identity(row: ActivityRow) -> tuple[object, ...]:
    return (row.kind, row.event, row.node, row.run_id, row.iter_id, row.step_id,
            row.event_id, row.timestamp)


def follow_activity(ctx: Context, name: str | None, backlog: int, *,
                    sleep: Callable[[float], None] = time.sleep,
                    polls: int | None = None) -> Iterator[list[dict[str, object]]]:
    """Yield batches of activity rows (the listing's columns), oldest first: first the
    newest ``backlog`` rows, then each batch of new rows. For one node, stops once the
    node has been seen ``active`` and is not any more (its rows up to that move yielded);
    else runs until the caller stops iterating (Ctrl-C in the CLI); ``polls`` bounds the
    looks (None: forever), for tests.

    ``name`` None means the caller's node, or the whole tree at the root. Crashed nodes
    in scope are healed once at the start, as ``node activity`` does.
    """
    from fractal.store import follow, reader  # deferred: start-up cost (11 modules)

    tree, branch = ctx.tree, ctx.subtree(name)
    nodes = None if branch == tree.root else [branch]

    def active() -> bool:
        row = reader.node_row(tree.db_path, branch) if nodes is not None else None
        return row is not None and row.status == Status.ACTIVE.value

    was_active = active()
    heal_all(tree, [r.node for r in reader.node_rows(tree.db_path)
                    if r.status == Status.ACTIVE.value and (nodes is None or r.node in nodes)])
    # The token is read before the backlog: a row that lands while the backlog is read or
    # printed changes the files after it, so the first look queries again (a row shown
    # twice is dropped by identity; read after the yield, such a row was never shown).
    token = follow.db_token(tree.db_path)
    first = list(reversed(reader.activity(tree.db_path, nodes, backlog)))
    seen = {_identity(r) for r in first}
    since = first[-1].timestamp if first else None
    yield [activity_row(r) for r in first]
    looks = 0
    while polls is None or looks < polls:
        looks += 1
        sleep(FOLLOW_POLL_S)
        now = follow.db_token(tree.db_path)
        if now == token:
            continue
        token = now
        is_active = active()  # read before the rows: every row up to a settling move is shown
        ended = was_active and not is_active
        was_active = was_active or is_active
        window = None if since is None else _behind(since, LAG_S)
        rows = follow.activity_since(tree.db_path, nodes, window)
        fresh = [r for r in rows if _identity(r) not in seen]
        if not fresh:
            if ended:
                return
            continue
        since = max(since or "", fresh[-1].timestamp)
        floor = _behind(since, LAG_S)
        seen = {k for k in seen | {_identity(r) for r in fresh} if str(k[-1]) >= floor}
        yield [activity_row(r) for r in fresh]
        if ended:
            return
