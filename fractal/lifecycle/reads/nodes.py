"""Read verbs: ``node status``, ``node list``, ``node activity``.

Plain queries through ``store.reader`` (stdlib sqlite3): they never import the
runtime or SQLAlchemy, so they answer fast. A node found crashed is healed first, and a
node whose worktree or branch vanished is moved to ``missing`` (``lifecycle/missing.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fractal.domain.hosts import elsewhere, status_note
from fractal.domain.run.subtree import Unsettled, unsettled_notice
from fractal.domain.sandbox import Mode, mode_of
from fractal.domain.signals import PARKING, decoration
from fractal.domain.states import SETTLED, Status
from fractal.domain.steps.waits import WAIT_STEP, WaitingChild, children_waited, waiting_detail
from fractal.lifecycle.context import Context
from fractal.lifecycle.heal import heal_all, heal_if_crashed
from fractal.lifecycle.missing import missing_detail, missing_parts, settle_missing
from fractal.store.backend import this_host
from fractal.store.rows import ActivityRow
from fractal.tree import parent_of

if TYPE_CHECKING:
    from fractal.store.reader import LastMerge


@dataclass(frozen=True)
class NodeStatus:
    """One node's lifecycle status and a short detail (the last run's reason when settled);
    ``unsandboxed``: it is active and the tree says ``sandbox: off``."""

    branch: str
    status: str
    detail: str
    unsandboxed: bool = False

    @property
    def line(self) -> str:
        return f"{self.status} ({self.detail})" if self.detail else self.status


def node_status(ctx: Context, name: str | None) -> NodeStatus:
    """The status of ``name`` (default: the caller's node). Raises NodeNotFound.

    A node whose worktree or branch vanished behind fractal's back reads ``missing``, with
    the fix in the detail (``fractal node delete`` deregisters it). A node another host
    owns (``nodes.host``) reads as the ledger has it, its detail naming the host and that
    its processes and worktree were not checked from here."""
    from fractal.store import reader  # deferred: start-up cost (10 modules)

    tree, branch = ctx.tree, ctx.target(name)
    heal_if_crashed(tree, branch)
    row = reader.node_row(tree.db_path, branch)
    status = row.status if row else "unregistered"
    if row is not None:
        gone = missing_parts(tree, [row])
        if settle_missing(tree, [row], gone):
            row = reader.node_row(tree.db_path, branch) or row
            status = row.status
        if branch in gone:
            return NodeStatus(branch, Status.MISSING.value, missing_detail(branch, gone[branch]))
    detail = _detail(tree.db_path, branch, status)
    if status in {s.value for s in SETTLED}:
        below = unsettled_notice(_unsettled(tree.db_path, branch))
        if below:
            detail = f"{detail}; {below}" if detail else below
    # deferred: start-up cost (18 modules)
    from fractal.lifecycle.merge.conflicts import children_conflict_detail

    clash = children_conflict_detail(tree, branch)  # `2 children conflict (calc/ops.py)`
    if clash:
        detail = f"{detail}; {clash}" if detail else clash
    refused = _refused(tree.db_path, branch)  # `merge of div refused (...)`
    if refused:
        detail = f"{detail}; {refused}" if detail else refused
    owner = elsewhere(row.host, this_host()) if row is not None else None
    if owner is not None:  # not healed, probed nor judged missing from here: say so
        note = status_note(owner, this_host())
        detail = f"{detail}; {note}" if detail else note
    unsandboxed = status == Status.ACTIVE.value and mode_of(tree.root_config()) is Mode.OFF
    return NodeStatus(branch, status, detail, unsandboxed)


def _refused(db_path: Path, branch: str) -> str:
    """``merge of div refused (`fractal inbox` says why)`` when the newest merge of a
    node into ``branch`` was refused (its agent's, inside a step); empty when none was.
    A direct child is named by its last segment."""
    from fractal.store import reader  # deferred: start-up cost (10 modules)

    children = [c.removeprefix(branch + ".") if parent_of(c) == branch else c
                for c, _ in reader.refused_merges(db_path, branch)]
    if not children:
        return ""
    noun = "merge of" if len(children) == 1 else "merges of"
    return f"{noun} {', '.join(children)} refused (`fractal inbox` says why)"


def _unsettled(db_path: Path, branch: str) -> list[Unsettled]:
    """``branch``'s descendants still active or paused, marked when waiting at a gate."""
    from fractal.store import reader  # deferred: start-up cost (10 modules)

    running = (Status.ACTIVE.value, Status.PAUSED.value)
    return [Unsettled(r.node, r.status, any(
                s.status in running for s in reader.awaiting_approval(db_path, r.node)))
            for r in reader.node_rows(db_path)
            if r.node.startswith(branch + ".") and r.status in running]


def _waiting(db_path: Path, branch: str) -> str:
    """``waiting for 2 children: div awaiting approval, ops idle, never started``: every
    child the wait holds for, with its state (``domain.steps.waits.WaitingChild.state``)."""
    from fractal.domain.attention.facts import is_hand_back  # deferred: start-up cost (2 modules)
    from fractal.store import reader  # deferred: start-up cost (10 modules)

    rows = reader.node_rows(db_path)
    live = children_waited(branch, [(r.node, r.status) for r in rows])
    status = {r.node: r.status for r in rows}
    merges = reader.newest_merges(db_path, live)
    return waiting_detail([WaitingChild(
        b, status[b], any(s.status in (Status.ACTIVE, Status.PAUSED)
                          for s in reader.awaiting_approval(db_path, b)),
        never_started=status[b] is Status.IDLE and reader.last_run(db_path, b) is None,
        handed_back=b in merges and merges[b].status == "failed"
        and is_hand_back(merges[b].reason))
        for b in live])


def _detail(db_path: Path, branch: str, status: str,
            merges: Mapping[str, LastMerge] | None = None) -> str:
    """``pausing``/``stopping``/``finishing``/``ending`` while a signal is pending on an
    active node (followed by what its open wait holds for: ``ending; run 2, waiting for 1
    child: c awaiting approval``), ``pausing: interrupted: SIGINT`` while a signal its
    supervisor received is parking the run, ``run N`` otherwise; the last run's reason for a settled node (an exited
    one's with its newest failed step's reason, ``domain.run.failcause``), after ``merged
    into main (3f2a9c1); `` while its newest merge landed and it has not run since; a
    stopped one's with the reason its stop was given (``Stopped by request: lunch``), a
    parked one's with the reason of the pause that parked it since its last resume
    (``run 1 parked: lunch (via pause of main)``), or the interruption that did."""
    from fractal.domain.run.failcause import failure_cause  # deferred: start-up cost (1 module)
    from fractal.store import reader  # deferred: start-up cost (10 modules)

    if status == Status.RETIRED.value:  # what it was, and why it was retired
        from fractal.store.eventlog import last_event  # deferred: start-up cost (11 modules)

        event = last_event(db_path, branch, "retire", "completed")
        if event is not None:
            return event.meta
    last = reader.last_run(db_path, branch)
    if status not in (Status.ACTIVE, Status.PAUSED):  # merged, until it runs again
        # deferred: start-up cost (2 modules)
        from fractal.domain.attention.facts import merged_detail, shows_merged

        merge = (reader.newest_merges(db_path, [branch]) if merges is None
                 else merges).get(branch)
        if merge is not None and merge.status == "merged" and shows_merged(
                status, merge.created_at, last.started_at if last else None):
            shown = merged_detail(merge.target, merge.sha)
            return f"{shown}; {last.meta}" if last is not None and last.meta else shown
    if last is None:
        return ""
    if status == Status.ACTIVE:
        shown = decoration(status, reader.pending_signals(db_path, branch))
        waits = any(s.step_name == WAIT_STEP for s in reader.open_steps(db_path, branch))
        if shown != status:  # `ending; run 2, waiting for 1 child: ...` until the wait ends
            word = shown[len("active ("):-1]
            return f"{word}; run {last.run_id}, {_waiting(db_path, branch)}" if waits else word
        from fractal.store.eventlog import last_event  # deferred: start-up cost (11 modules)

        parking = last_event(db_path, branch, "pause")  # a signal tears the step down
        if parking is not None and parking.status == "started" and \
                parking.run_id == last.run_id and parking.meta.startswith(PARKING):
            return f"pausing: {parking.meta.removeprefix(PARKING)}"
        if waits:
            return f"run {last.run_id}, {_waiting(db_path, branch)}"
        # deferred: start-up cost (4 modules)
        from fractal.domain.usage.outage import OUTAGE_EVENT, cut_short_hint
        from fractal.store.eventlog import last_event  # deferred: start-up cost (11 modules)

        waiting = last_event(db_path, branch, "usage_wait")
        if waiting is not None and waiting.status == "started" and \
                waiting.run_id == last.run_id:
            return waiting.meta  # `waiting for usage window until 14:05:05Z`
        outage = last_event(db_path, branch, OUTAGE_EVENT)
        if outage is not None and outage.status == "started" and outage.run_id == last.run_id:
            return cut_short_hint(outage.meta, branch)  # `waiting out a provider outage ...`
        gates = reader.awaiting_approval(db_path, branch)
        if gates:
            return (f"run {last.run_id}, {gates[-1].step_name} awaiting approval "
                    f"(step {gates[-1].step_id})")
        return f"run {last.run_id}"
    if status == Status.IDLE:
        return ""
    if status == Status.PAUSED:
        # deferred: start-up cost (11 modules)
        from fractal.store.eventlog import last_event, pause_ask

        parked = last_event(db_path, branch, "pause", "completed")
        if parked is not None and parked.meta.startswith("parked interrupted:"):
            return parked.meta.removeprefix("parked ")  # `interrupted: SIGHUP`
        asked = pause_ask(db_path, branch)  # the reason `pause --reason` gave, if any
        if asked is not None and asked.meta and asked.run_id == last.run_id:
            return f"run {last.run_id} parked: {asked.meta}"
        return f"run {last.run_id} parked"
    if status == Status.EXITED.value:  # how it ended, then why: its newest failed step
        cause = reader.failed_step(db_path, last.run_id)
        shown = failure_cause(last.meta, *cause) if cause is not None else ""
        return f"{last.meta}; {shown}" if shown else last.meta
    if status == Status.STOPPED.value:  # the reason `node stop --reason` gave, if any
        from fractal.store.eventlog import last_event  # deferred: start-up cost (11 modules)

        asked = last_event(db_path, branch, "stop", "completed")
        if asked is not None and asked.meta and asked.run_id == last.run_id \
                and asked.meta not in last.meta:
            return f"{last.meta}: {asked.meta}"
    return last.meta


def list_nodes(ctx: Context, name: str | None, *, show: str = "live") -> list[dict[str, object]]:
    """Rows for the subtree under ``name`` (default: the caller's node; the whole tree at
    the root), the node itself included when it is not the root. Heals crashed nodes.

    ``show`` is ``live`` (default: retired nodes hidden), ``all``, or ``retired`` (only
    them). A node whose worktree or branch vanished is listed ``missing``."""
    from fractal.store import reader  # deferred: start-up cost (10 modules)

    tree, top = ctx.tree, ctx.subtree(name)
    rows = reader.node_rows(tree.db_path)
    members = [r.node for r in rows if r.node == top or r.node.startswith(top + ".")]
    if heal_all(tree, [b for b in members
                       if any(r.node == b and r.status is Status.ACTIVE for r in rows)]):
        rows = reader.node_rows(tree.db_path)
    retired = Status.RETIRED.value
    chosen = [r for r in sorted(rows, key=lambda r: r.node) if r.node in members and (
        show == "all" or (r.status == retired) == (show == "retired"))]
    gone = missing_parts(tree, chosen)
    if settle_missing(tree, chosen, gone):
        fresh = {r.node: r for r in reader.node_rows(tree.db_path)}
        chosen = [fresh.get(r.node, r) for r in chosen]
    out: list[dict[str, object]] = []
    merges = reader.newest_merges(tree.db_path, [r.node for r in chosen])  # one read
    for row in chosen:
        status = Status.MISSING.value if row.node in gone else row.status
        detail = missing_detail(row.node, gone[row.node]) if row.node in gone \
            else _detail(tree.db_path, row.node, row.status, merges)
        out.append({
            "node": row.node, "status": status, "detail": detail, "title": row.title or "",
            "max_cost": row.max_cost, "created": row.created_at,
        })
    return out


def activity(ctx: Context, name: str | None, limit: int | None) -> list[dict[str, object]]:
    """Run, iteration and step start/end rows and events, newest first.

    ``name`` None means the caller's node, or the whole tree at the root.
    """
    from fractal.store import reader  # deferred: start-up cost (10 modules)

    tree, branch = ctx.tree, ctx.subtree(name)
    nodes = None if branch == tree.root else [branch]
    rows = reader.node_rows(tree.db_path)
    heal_all(tree, [r.node for r in rows if r.status is Status.ACTIVE
                    and (nodes is None or r.node in nodes)])
    return [activity_row(row) for row in reader.activity(tree.db_path, nodes, limit)]


def activity_row(row: ActivityRow) -> dict[str, object]:
    """One ``activity`` view row as the listing's columns (``ref`` is ``run.iter``)."""
    ref = "" if row.run_id is None else str(row.run_id)
    if row.iter is not None:
        ref += f".{row.iter}"
    step = "" if row.step is None else f"{row.step} {row.step_name or ''}".strip()
    return {
        "timestamp": row.timestamp, "node": row.node, "kind": row.kind, "event": row.event,
        "ref": ref, "step": step, "status": row.status, "exit": row.exit_code,
        "duration": row.duration, "cost": row.cost, "reason": row.meta,
        "run_id": row.run_id, "iter_id": row.iter_id, "step_id": row.step_id,
        "actor": row.actor,
    }

