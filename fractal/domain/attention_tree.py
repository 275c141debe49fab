"""Facts of the attention inbox that need the whole tree, not one node: which nodes run
below each node, and when a usage-window wait ends (pure: values in, values out)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

from fractal.domain.attention import NodeFacts
from fractal.domain.subtree import Unsettled

__all__ = ["wait_until", "with_running_below"]


def with_running_below(facts: Sequence[NodeFacts]) -> list[NodeFacts]:
    """``facts`` with each node's ``running_below`` set: its descendants (dotted lineage)
    that are active or paused, each marked when it waits at an approval gate. Once a
    node's newest run has ended, a descendant counts only if its current run began by
    that end (or its start is unknown): one started later was not left running by that
    run. And, for a node whose loop waits for its children, ``unstarted``: its direct
    children that are idle and never ran (sorted by branch). And ``parent_running``: its
    parent is a node (not the root) that is active with its supervisor alive."""
    below: dict[str, list[tuple[Unsettled, float | None]]] = {}
    running = {f.branch for f in facts if f.status == "active" and not f.gone}
    idle: dict[str, list[str]] = {}
    for f in facts:
        if f.status == "idle" and f.run_id is None and "." in f.branch:
            idle.setdefault(f.branch.rpartition(".")[0], []).append(f.branch)
        if f.status not in ("active", "paused"):
            continue
        mark = Unsettled(f.branch, f.status, bool(f.gates))
        head = f.branch
        while "." in head:  # every ancestor of a running node has it below
            head = head.rpartition(".")[0]
            below.setdefault(head, []).append((mark, f.run_started))
    out: list[NodeFacts] = []
    for node in facts:
        ended = node.run_ended
        found = tuple(sorted((mark for mark, began in below.get(node.branch, ())
                              if ended is None or began is None or began <= ended),
                             key=lambda u: u.branch))
        unstarted = tuple(sorted(idle.get(node.branch, ()))) if node.waiting_children else ()
        parent_running = node.branch.rpartition(".")[0] in running
        if (found, unstarted, parent_running) != (node.running_below, node.unstarted,
                                                  node.parent_running):
            node = replace(node, running_below=found, unstarted=unstarted,
                           parent_running=parent_running)
        out.append(node)
    return out


def wait_until(shown: str, wakes: Sequence[float]) -> float | None:
    """The instant a usage-window wait ends: of the closed windows' wake instants
    ``wakes`` (epoch s), the one whose UTC ``HH:MMZ`` the wait's notice ``shown``
    (``waiting for usage window until 14:05:05Z``; an older notice's ``14:05Z``) names,
    else the latest; None when no window is closed (it reopened, or another node's probe
    of it is the thing waited for)."""
    named = [w for w in wakes if shown.endswith(time.strftime("%H:%M:%SZ", time.gmtime(w)))] \
        or [w for w in wakes if shown.endswith(time.strftime("%H:%MZ", time.gmtime(w)))]
    pool = named or list(wakes)
    return max(pool) if pool else None
