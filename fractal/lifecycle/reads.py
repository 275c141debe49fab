"""Read verbs: ``node status``, ``node list``, ``node activity`` (ref §2.2).

Plain queries through ``store.reader`` (stdlib sqlite3): they never import the
runtime or SQLAlchemy, so they answer fast. A node found crashed is healed first.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fractal.domain.outcome import Status
from fractal.domain.signals import decoration
from fractal.lifecycle.heal import heal_all, heal_if_crashed
from fractal.lifecycle.targets import subtree_target, target_node
from fractal.store.rows import ActivityRow


@dataclass(frozen=True)
class NodeStatus:
    """One node's lifecycle status and a short detail (the last run's reason when settled)."""

    branch: str
    status: str
    detail: str

    @property
    def line(self) -> str:
        return f"{self.status} ({self.detail})" if self.detail else self.status


def node_status(cwd: Path, name: str | None) -> NodeStatus:
    """The status of ``name`` (default: the caller's node). Raises NodeNotFound."""
    from fractal.store import reader

    tree, branch = target_node(cwd, name)
    heal_if_crashed(tree, branch)
    row = reader.node_row(tree.db_path, branch)
    status = row.status if row else "unregistered"
    return NodeStatus(branch, status, _detail(tree.db_path, branch, status))


def _detail(db_path: Path, branch: str, status: str) -> str:
    """``pausing``/``stopping``/``finishing`` while a signal is pending on an active node,
    ``run N`` otherwise; the last run's reason for a settled node (ref §2.2 status)."""
    from fractal.store import reader

    last = reader.last_run(db_path, branch)
    if last is None:
        return ""
    if status == Status.ACTIVE.value:
        shown = decoration(status, reader.pending_signals(db_path, branch))
        if shown != status:
            return shown[len("active ("):-1]
        gates = reader.awaiting_approval(db_path, branch)
        if gates:
            return (f"run {last.run_id}, {gates[-1].step_name} awaiting approval "
                    f"(step {gates[-1].step_id})")
        return f"run {last.run_id}"
    if status in (Status.IDLE.value,):
        return ""
    if status == Status.PAUSED.value:
        return f"run {last.run_id} parked"
    return last.meta


def list_nodes(cwd: Path, name: str | None) -> list[dict[str, object]]:
    """Rows for the subtree under ``name`` (default: the caller's node; the whole tree at
    the root), the node itself included when it is not the root. Heals crashed nodes."""
    from fractal.store import reader

    tree, top = subtree_target(cwd, name)
    rows = reader.node_rows(tree.db_path)
    members = [r.node for r in rows if r.node == top or r.node.startswith(top + ".")]
    if heal_all(tree, [b for b in members
                       if any(r.node == b and r.status == Status.ACTIVE.value for r in rows)]):
        rows = reader.node_rows(tree.db_path)
    out: list[dict[str, object]] = []
    for row in sorted(rows, key=lambda r: r.node):
        if row.node not in members:
            continue
        out.append({
            "node": row.node, "status": row.status,
            "detail": _detail(tree.db_path, row.node, row.status), "title": row.title or "",
            "max_cost": row.max_cost, "created": row.created_at,
        })
    return out


def activity(cwd: Path, name: str | None, limit: int | None) -> list[dict[str, object]]:
    """Run, iteration and step start/end rows and events, newest first.

    ``name`` None means the caller's node, or the whole tree at the root.
    """
    from fractal.store import reader

    tree, branch = subtree_target(cwd, name)
    nodes = None if branch == tree.root else [branch]
    rows = reader.node_rows(tree.db_path)
    heal_all(tree, [r.node for r in rows if r.status == Status.ACTIVE.value
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


def messages(cwd: Path, name: str | None, channel: str,
             limit: int | None) -> list[dict[str, object]]:
    """Messages on ``channel`` of node ``name`` (every node when None), newest first."""
    from fractal.store import reader

    tree, branch = subtree_target(cwd, name)
    node = None if name is None else branch
    return [{"created_at": m.created_at, "node": m.node, "channel": m.channel,
             "priority": m.priority, "subject": m.subject, "uuid": m.message_uuid,
             "data": m.data}
            for m in reader.messages(tree.db_path, node, channel, limit)]
