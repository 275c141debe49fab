"""``fractal inbox`` and ``fractal inbox ack``: everything in the tree that waits for a
human, oldest first, each with the command that resolves it.

Reads only: the store's read-only connection (``store.attention``), the tree brake's
latch file (``fractal.control.latched``), each active node's
``config.json`` (its step timeout) and pane transcript mtime (a node writing output is
not stalled), a tmux probe for active nodes (one whose supervisor is provably gone is
shown as interrupted and never healed here), and ``git diff --shortstat`` per pending
gate. The detectors themselves are ``fractal.domain.attention.rules``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fractal.domain.attention.facts import merged_detail, shows_merged
from fractal.domain.attention.rules import (
    Gate,
    HandBack,
    Item,
    NodeFacts,
    Note,
    OutageHold,
    UsageHold,
    classify,
)
from fractal.domain.attention_route import HOLD_GRACE_S, for_operator, held_subject
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
        from datetime import UTC, datetime  # deferred: start-up cost (3 modules)

        from fractal.store.timefmt import format_ts  # deferred: start-up cost (5 modules)

        item = self.item
        return {"id": item.id, "since": format_ts(datetime.fromtimestamp(item.since, UTC)),
                "kind": item.kind.value, "node": item.node, "summary": item.summary,
                "command": item.command, "acked": self.acked, "key": item.key,
                "details": dict(item.details)}


def _epoch(text: str | None) -> float | None:
    from fractal.store.timefmt import to_epoch  # deferred: start-up cost (5 modules)

    return None if not text else to_epoch(text)


def _step_timeout(tree: Tree, branch: str) -> int | None:
    from fractal.domain.durations import parse_duration  # deferred: start-up cost (4 modules)

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
    from concurrent.futures import ThreadPoolExecutor  # deferred: start-up cost (10 modules)

    with ThreadPoolExecutor(max_workers=min(8, len(branches))) as pool:
        return dict(zip(branches, pool.map(lambda b: gate_diffstat(tree, b), branches),
                        strict=True))


def tree_facts(tree: Tree, *, diffstats: bool = True, create: bool = True
               ) -> tuple[list[NodeFacts], dict[str, str]]:
    """Every registered node's facts (and a sender's that is no longer registered, for
    its messages to the operator), and the acknowledgements (key -> fingerprint).
    ``create`` False never creates the database (see ``store.reader``)."""
    # deferred: start-up cost (1 module)
    from fractal.domain.attention.tree import with_running_below

    facts, acks = node_facts(tree, diffstats=diffstats, create=create)
    return with_running_below(facts), acks


def node_facts(tree: Tree, *, diffstats: bool = True, create: bool = True,
               only: set[str] | None = None) -> tuple[list[NodeFacts], dict[str, str]]:
    """``tree_facts`` without ``running_below``, for the branches ``only`` (None: all)."""
    from fractal.control import latched  # deferred: start-up cost (8 modules)
    from fractal.domain.attention.tree import wait_until  # deferred: start-up cost (1 module)
    from fractal.domain.run.failcause import failure_cause  # deferred: start-up cost (1 module)
    from fractal.lifecycle.heal import crashed  # deferred: start-up cost (2 modules)
    from fractal.store.attention import attention_rows  # deferred: start-up cost (17 modules)

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
        by_operator = rows.operator_pauses.get(node.node)
        merge = rows.merges.get(node.node)
        landed = rows.landed.get(node.node)
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
            merged_at=_epoch(landed.created_at) if landed else None, braked=braked,
            merged_into=merged_detail(landed.target, landed.sha)
            if landed and shows_merged(node.status, landed.created_at,
                                       run.started_at if run else None) else "",
            top_level=node.parent in (None, tree.root), parent=node.parent or tree.root,
            waiting_since=_epoch(rows.waiting_since.get(node.node)),
            paused_by_operator=_epoch(by_operator[1])
            if by_operator and run and by_operator[0] == run.run_id else None,
            run_cause=failure_cause(run.meta, *rows.causes[run.run_id])
            if run and run.run_id in rows.causes else "",
            unmerged_below=_unmerged(rows.unmerged.get(node.node), run)))
    known = {n.node for n in rows.nodes}
    facts += [NodeFacts(sender, "unregistered", to_operator=_notes(notes))
              for sender, notes in sorted(rows.notes.items()) if sender not in known]
    return facts, rows.acks


def _unmerged(booked: tuple[int | None, str] | None, run: RunRow | None) -> str:
    """The subtree work never merged that ``run``'s end booked (``unmerged`` event of that
    run), else empty: an older run's booking is stale."""
    if booked is None or run is None or booked[0] != run.run_id:
        return ""
    return booked[1]


def _unresolved(tree: Tree, branch: str, status: str) -> str | None:
    """The worktree of a settled child that still holds a handed-back merge, unresolved
    (its hand-back note kept, git's merge in progress), else None."""
    if status in ("active", "paused"):
        return None
    from fractal.domain.merge.conflicts import Operation  # deferred: start-up cost (1 module)

    # deferred: start-up cost (19 modules)
    from fractal.workspace.conflict_guard import operation_in_progress
    from fractal.workspace.handback import read_note  # deferred: start-up cost (6 modules)

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
    # deferred: start-up cost (39 modules)
    from fractal.lifecycle.merge.diff import uncommitted_note, with_uncommitted
    from fractal.workspace.diffstat import shortstat  # deferred: start-up cost (29 modules)

    base = parent_of(branch) or tree.root
    try:
        stat = shortstat(tree.repo, base, branch)
    except FractalError:
        stat = None
    return with_uncommitted(stat, uncommitted_note(tree, branch))


def hold_grace(tree: Tree) -> float:
    """Seconds an item a running parent loop can act on is held for it before it reaches
    the operator: the root config's ``inbox_grace`` (a duration, ``10m``, or seconds),
    else ``HOLD_GRACE_S``; an unreadable value counts as the default."""
    from fractal.domain.durations import parse_duration  # deferred: start-up cost (4 modules)

    value = tree.root_config().get("inbox_grace")
    try:
        if isinstance(value, bool):
            return HOLD_GRACE_S
        if isinstance(value, int | float):
            return max(0.0, float(value))
        return float(parse_duration(value, "inbox_grace")) if isinstance(value, str) \
            else HOLD_GRACE_S
    except (FractalError, ValueError):
        return HOLD_GRACE_S


def tree_inbox(tree: Tree, *, include_acked: bool = False, now: float | None = None,
               diffstats: bool = True) -> list[Entry]:
    """The operator's attention items, oldest first (acknowledged ones with
    ``include_acked``); items held for a running parent loop (``attention_route``) are
    left out (``inbox_and_held`` lists them too)."""
    return _split(tree, include_acked=include_acked, now=now, diffstats=diffstats)[0]


def _split(tree: Tree, *, include_acked: bool, now: float | None, diffstats: bool
           ) -> tuple[list[Entry], list[tuple[Item, str]]]:
    facts, acks = tree_facts(tree, diffstats=diffstats)
    at = time.time() if now is None else now
    found = classify(facts, at, acks, include_acked=include_acked)
    mine, held = for_operator(found, facts, at, hold_grace(tree))
    return [Entry(item, acked) for item, acked in mine], held


def inbox(ctx: Context, *, include_acked: bool = False) -> list[Entry]:
    """``fractal inbox``: the items of the context's tree."""
    return tree_inbox(ctx.tree, include_acked=include_acked)


def inbox_and_held(ctx: Context, *, include_acked: bool = False
                   ) -> tuple[list[Entry], list[tuple[Item, str]]]:
    """``fractal inbox``'s items, and the items held for a loop that can act on them,
    each with that loop's branch (``operator``: the operator's own recent pause), oldest
    first, from one read."""
    return _split(ctx.tree, include_acked=include_acked, now=None, diffstats=True)


def held_line(held: Sequence[tuple[Item, str]], grace: float) -> str:
    """What ``fractal inbox`` says of the items held back: ``2 items are with the loop
    that acts on them first (main.lead: gate main.lead.c, exited main.lead.d); each
    reaches you after 10m unhandled`` ('' when none is); an ``unstarted`` item names the
    idle children (``main.lead2: unstarted main.lead2.a``), ``held_subject``."""
    if not held:
        return ""
    from fractal.domain.durations import format_duration  # deferred: start-up cost (4 modules)

    by: dict[str, list[str]] = {}
    for item, holder in held:
        by.setdefault(holder, []).append(held_subject(item))
    parts = "; ".join(f"{'your own action' if h == 'operator' else h}: {', '.join(w)}"
                      for h, w in sorted(by.items()))
    count = "1 item is" if len(held) == 1 else f"{len(held)} items are"
    return (f"{count} with the loop that acts on it first ({parts}); each reaches you after "
            f"{format_duration(int(grace))} unhandled")


def ack(ctx: Context, item: str) -> Entry:
    """Hide the item whose id (or key) is ``item`` until its state changes.

    Raises Refused unless the operator acks (a node's loop must not hide the operator's
    items), FractalError when no current item has that id.
    """
    from fractal.store.inbox import InboxStore  # deferred: start-up cost (18 modules)

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
