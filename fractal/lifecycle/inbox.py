"""``fractal inbox`` and ``fractal inbox ack``: everything in the tree that waits for a
human, oldest first, each with the command that resolves it.

Reads only: the store's read-only connection (``store.attention``), the tree brake's
latch file (``fractal.control.latched``), each active node's
``config.json`` (its step timeout) and pane transcript mtime (a node writing output is
not stalled), a tmux probe for active nodes (one whose supervisor is provably gone is
shown as interrupted and never healed here), and ``git diff --shortstat`` per pending
gate. The detectors themselves are ``fractal.domain.attention``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fractal.domain.attention import (
    Gate,
    HandBack,
    Item,
    NodeFacts,
    Note,
    OutageHold,
    UsageHold,
    classify,
)
from fractal.errors import FractalError
from fractal.lifecycle.context import Context
from fractal.tree import Tree, parent_of

if TYPE_CHECKING:
    from fractal.store.attention import NoteRow, WaitRow
    from fractal.store.rows import RunRow


@dataclass(frozen=True)
class Entry:
    """One inbox line: the item and whether it is acknowledged (shown with ``--all``)."""

    item: Item
    acked: bool

    def as_row(self) -> dict[str, object]:
        """The item as the listing's columns (``since`` as ISO text)."""
        from datetime import UTC, datetime

        from fractal.store.timefmt import format_ts

        item = self.item
        return {"id": item.id, "since": format_ts(datetime.fromtimestamp(item.since, UTC)),
                "kind": item.kind.value, "node": item.node, "summary": item.summary,
                "command": item.command, "acked": self.acked, "key": item.key,
                "details": dict(item.details)}


def _epoch(text: str | None) -> float | None:
    from fractal.store.timefmt import to_epoch

    return None if not text else to_epoch(text)


def _step_timeout(tree: Tree, branch: str) -> int | None:
    from fractal.domain.durations import parse_duration

    try:
        data = json.loads(tree.node(branch).config_path.read_text(encoding="utf-8"))
        value = data.get("step_timeout") if isinstance(data, dict) else None
        return parse_duration(value, "step_timeout") if isinstance(value, str) else None
    except (OSError, ValueError, RecursionError, FractalError):
        return None


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def _diffstats(tree: Tree, branches: list[str]) -> dict[str, str | None]:
    """``gate_diffstat`` of each branch, the git processes run side by side."""
    if len(branches) < 2:
        return {b: gate_diffstat(tree, b) for b in branches}
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(8, len(branches))) as pool:
        return dict(zip(branches, pool.map(lambda b: gate_diffstat(tree, b), branches),
                        strict=True))


def tree_facts(tree: Tree, *, diffstats: bool = True, create: bool = True
               ) -> tuple[list[NodeFacts], dict[str, str]]:
    """Every registered node's facts (and a sender's that is no longer registered, for
    its messages to the operator), and the acknowledgements (key -> fingerprint).
    ``create`` False never creates the database (see ``store.reader``)."""
    from fractal.domain.attention_tree import with_running_below

    facts, acks = node_facts(tree, diffstats=diffstats, create=create)
    return with_running_below(facts), acks


def node_facts(tree: Tree, *, diffstats: bool = True, create: bool = True,
               only: set[str] | None = None) -> tuple[list[NodeFacts], dict[str, str]]:
    """``tree_facts`` without ``running_below``, for the branches ``only`` (None: all)."""
    from fractal.control import latched
    from fractal.domain.attention_tree import wait_until
    from fractal.domain.failcause import failure_cause
    from fractal.lifecycle.heal import crashed
    from fractal.store.attention import attention_rows

    rows = attention_rows(tree.db_path, tree.root, create=create, only=only)
    stats = _diffstats(tree, sorted(rows.gates)) if diffstats else {}
    wakes = [w for w, _ in rows.wakes]
    braked = latched(tree)
    facts: list[NodeFacts] = []
    for node in rows.nodes:
        run = rows.last_runs.get(node.node)
        gates = tuple(Gate(s.step_id, s.step_name,
                           _epoch(rows.waited.get(s.step_id) or s.started_at) or 0.0,
                           stats.get(node.node))
                      for s in rows.gates.get(node.node, ()))
        active = node.status == "active"
        writes = [w for w in (_epoch(rows.last_writes.get(node.node)),
                              _mtime(tree.node(node.node).pane_log) if active else None)
                  if w is not None]
        pause = rows.pauses.get(node.node)
        ask = rows.pause_asks.get(node.node)
        merge = rows.merges.get(node.node)
        wait = rows.waits.get(node.node) if active else None
        hold = None
        if wait is not None and run is not None and wait.run_id == run.run_id:
            until = wait_until(wait.shown, wakes)
            names = [name for w, name in rows.wakes if w == until]
            hold = UsageHold(wait.event_id, _epoch(wait.created_at) or 0.0, until,
                             names[0] if names else "")
        facts.append(NodeFacts(
            branch=node.node, status=node.status,
            run_id=run.run_id if run else None, run_status=run.status if run else None,
            run_exit=run.exit_code if run else None, run_reason=run.meta if run else "",
            run_started=_epoch(run.started_at) if run else None,
            run_ended=_epoch(run.ended_at) if run else None,
            run_spent=rows.spent.get(run.run_id) if run else None,
            run_cap=run.max_cost if run else None, gates=gates,
            last_write=max(writes) if writes else None,
            step_timeout=_step_timeout(tree, node.node) if active else None,
            gone=active and crashed(tree, node.node, node),
            paused_since=_epoch(pause[0]) if pause else None,
            pause_reason=pause[1] if pause else "", title=node.title or "",
            pause_asked=ask[1] if ask and run and ask[0] == run.run_id else "",
            merge=HandBack(merge.merge_id, merge.target, merge.reason,
                           _epoch(merge.created_at) or 0.0,
                           _unresolved(tree, node.node, node.status))
            if merge else None,
            usage=hold, outage=_outage(rows.outages.get(node.node) if active else None, run),
            to_operator=_notes(rows.notes.get(node.node, ())),
            waiting_children=active and node.node in rows.holding,
            merged_at=_epoch(rows.landed.get(node.node)), braked=braked,
            run_cause=failure_cause(run.meta, *rows.causes[run.run_id])
            if run and run.run_id in rows.causes else ""))
    known = {n.node for n in rows.nodes}
    facts += [NodeFacts(sender, "unregistered", to_operator=_notes(notes))
              for sender, notes in sorted(rows.notes.items()) if sender not in known]
    return facts, rows.acks


def _unresolved(tree: Tree, branch: str, status: str) -> str | None:
    """The worktree of a settled child that still holds a handed-back merge, unresolved
    (its hand-back note kept, git's merge in progress), else None."""
    if status in ("active", "paused"):
        return None
    from fractal.domain.conflicts import Operation
    from fractal.workspace.conflict_guard import operation_in_progress
    from fractal.workspace.handback import read_note

    paths = tree.node(branch)
    if not paths.worktree.is_dir() or read_note(paths.node_dir) is None:
        return None
    return str(paths.worktree) if operation_in_progress(paths.worktree) is Operation.MERGE \
        else None


def _outage(wait: WaitRow | None, run: RunRow | None) -> OutageHold | None:
    """The open provider-outage wait of the node's newest run, if it is in one."""
    if wait is None or run is None or wait.run_id != run.run_id:
        return None
    return OutageHold(wait.event_id, _epoch(wait.created_at) or 0.0, wait.shown)


def _notes(rows: Sequence[NoteRow]) -> tuple[Note, ...]:
    return tuple(Note(r.uuid, r.subject, _epoch(r.created_at) or 0.0, r.priority)
                 for r in rows)


def gate_diffstat(tree: Tree, branch: str) -> str | None:
    """What ``branch`` changed since it forked from its parent (``git diff --shortstat``),
    with ``; N uncommitted file(s)`` when its worktree holds project edits not committed."""
    from fractal.lifecycle.diff import uncommitted_note, with_uncommitted
    from fractal.workspace.diffstat import shortstat

    base = parent_of(branch) or tree.root
    try:
        stat = shortstat(tree.repo, base, branch)
    except FractalError:
        stat = None
    return with_uncommitted(stat, uncommitted_note(tree, branch))


def tree_inbox(tree: Tree, *, include_acked: bool = False, now: float | None = None,
               diffstats: bool = True) -> list[Entry]:
    """The tree's attention items, oldest first (acknowledged ones with ``include_acked``)."""
    facts, acks = tree_facts(tree, diffstats=diffstats)
    found = classify(facts, time.time() if now is None else now, acks,
                     include_acked=include_acked)
    return [Entry(item, acked) for item, acked in found]


def inbox(ctx: Context, *, include_acked: bool = False) -> list[Entry]:
    """``fractal inbox``: the items of the context's tree."""
    return tree_inbox(ctx.tree, include_acked=include_acked)


def ack(ctx: Context, item: str) -> Entry:
    """Hide the item whose id (or key) is ``item`` until its state changes.

    Raises Refused unless the operator acks (a node's loop must not hide the operator's
    items), FractalError when no current item has that id.
    """
    from fractal.store.inbox import InboxStore

    tree = ctx.tree
    ctx.authorize("ack", tree.root)
    entries = tree_inbox(tree, include_acked=True, diffstats=False)
    matches = [e for e in entries if item in (e.item.id, e.item.key)]
    if not matches:
        known = ", ".join(e.item.id for e in entries) or "none"
        raise FractalError(f"no inbox item {item!r}; current items: {known} "
                           "(`fractal inbox --all` lists them)")
    entry = matches[0]
    InboxStore(tree.db_path).ack(entry.item.key, entry.item.fingerprint)
    return Entry(entry.item, True)
