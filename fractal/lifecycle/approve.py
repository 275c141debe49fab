"""Approval gates from the parent's side: ``node approve`` and ``node pending``
(docs/lifecycle.md, "Approval gates")."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fractal.control import wake_node
from fractal.domain.states import Status
from fractal.lifecycle.context import Context, Refused
from fractal.store.rows import StepRow
from fractal.tree import parent_of

if TYPE_CHECKING:
    from fractal.store.ledger import Ledger

_WAITING = (Status.ACTIVE, Status.PAUSED)


@dataclass(frozen=True)
class Approved:
    """The gate that was released."""

    branch: str
    step_id: int
    step_name: str


def approved_line(done: Approved) -> str:
    """What the front ends say for the gate ``done`` released (``fractal node approve``
    prints it; the dashboard notifies it): ``approved BRANCH step N (NAME)``."""
    return f"approved {done.branch} step {done.step_id} ({done.step_name})"


def gated_steps(ledger: Ledger, branch: str) -> list[StepRow]:
    """``branch``'s steps awaiting approval on an active or paused node, oldest first."""
    row = ledger.node(branch)
    if row is None or row.status not in _WAITING:
        return []
    return [s for s in ledger.pending_approvals(branch) if s.status in _WAITING]


def gate_now(branch: str, pending: list[StepRow]) -> str:
    """What a refusal naming a step that no longer waits adds (a gate re-armed after an
    interruption waits under a new step id): ``; its gate awaiting approval now is step 62
    (PLAN): fractal node approve main.lead.c 62`` for the newest of ``pending`` (``branch``'s
    gated steps), or ``; nothing of it awaits approval now (`fractal node pending` lists
    the gates that do)`` when there is none."""
    if not pending:
        return ("; nothing of it awaits approval now (`fractal node pending` lists the "
                "gates that do)")
    now = pending[-1]
    return (f"; its gate awaiting approval now is step {now.step_id} ({now.step_name}): "
            f"fractal node approve {branch} {now.step_id}")


def approve(ctx: Context, name: str, step_id: int | None = None) -> Approved:
    """Release ``name``'s gated step (default: its pending one). Only its direct parent,
    or the operator at the root, may approve (``fractal.domain.authority``); the first
    approval wins, and a later one is refused naming who approved and when. Raises
    Refused."""
    tree, branch = ctx.tree, ctx.target(name)
    ctx.authorize("approve", branch)
    ledger, caller, actor = ctx.ledger, ctx.acting, ctx.actor

    def refuse(why: str, step: int | None = None, then: str = "") -> Refused:
        last = ledger.last_run(branch)
        return ctx.refuse("approve", branch, why + _approved_by(
            tree.db_path, branch, step, None if last is None else last.run_id) + then)

    pending = gated_steps(ledger, branch)
    if step_id is None:
        if not pending:
            raise refuse(f"node {branch} has no step awaiting approval")
        target = pending[-1]
    else:
        matches = [s for s in pending if s.step_id == step_id]
        if not matches:
            raise refuse(f"step {step_id} of {branch} is not awaiting approval", step_id,
                         then=gate_now(branch, pending))
        target = matches[0]
    if not ledger.approve_step(target.step_id):
        raise refuse(f"step {target.step_id} of {branch} was already approved",
                     target.step_id)
    ledger.add_event(branch, "approve", actor=actor, status="completed",
                     metadata=f"step {target.step_id} ({target.step_name})",
                     run_id=target.run_id, iter_id=target.iter_id, step_id=target.step_id)
    if caller != tree.root:
        ledger.add_event(caller, "approve", actor=actor, status="completed",
                         metadata=f"approved {branch} step {target.step_id} ({target.step_name})")
    wake_node(tree, branch)
    return Approved(branch, target.step_id, target.step_name)


def _approved_by(db_path: Path, branch: str, step_id: int | None, run_id: int | None) -> str:
    """``: step 7 (REVIEW) was approved by main.lead at 2026-12-07T01:23:45Z`` for the
    newest approval of ``branch`` in its run ``run_id`` (of step ``step_id`` when given),
    '' when none was recorded: a refusal says who was first."""
    from fractal.store.eventlog import last_event  # deferred: start-up cost (10 modules)

    event = last_event(db_path, branch, "approve", "completed")
    if event is None or run_id is None or event.run_id != run_id \
            or (step_id is not None and event.step_id != step_id):
        return ""
    when = event.created_at[:19] + "Z" if len(event.created_at) >= 19 else event.created_at
    return f": {event.meta or 'its gate'} was approved by {event.actor or 'someone'} at {when}"


def pending(ctx: Context, name: str | None, *, whole: bool = False) -> list[dict[str, object]]:
    """Rows ``branch, step_id, step, step_name, diffstat`` of gated steps awaiting approval,
    by branch. ``diffstat`` is what merging the child would bring now (its summary line).

    Whose: with ``whole``, every node below ``name`` (default: the caller's node); without
    it, the direct children of ``name``, or, for the operator at the root with no
    ``name``, every gate of the tree (the operator may approve any of them)."""
    # deferred: start-up cost (37 modules)
    from fractal.lifecycle.merge.diff import diffstat_summary

    tree, top, ledger = ctx.tree, ctx.subtree(name), ctx.ledger
    everywhere = whole or (name is None and top == tree.root)
    out: list[dict[str, object]] = []
    for row in sorted(ledger.nodes(), key=lambda r: r.node):
        below = row.node.startswith(top + ".") if everywhere else parent_of(row.node) == top
        if not below:
            continue
        for step in gated_steps(ledger, row.node):
            out.append({"branch": row.node, "step_id": step.step_id, "step": step.step,
                        "step_name": step.step_name,
                        "diffstat": diffstat_summary(tree, row.node)})
    return out
