"""Pure rules of the cleanup verbs: retire, unretire, delete, reset, destroy.

Each rule takes the facts a verb gathered (statuses, whether the worktree and branch are
there, the unsaved files, the commits not yet merged into the node's target) and returns
the refusal to raise, or None when the verb may go ahead. The rules, in words:

- Nothing is torn down under a live node: ``active``, ``paused``, or ``idle`` with a
  supervisor still booting. ``--force`` never overrides this (stop or kill it first).
- ``retire`` hides a node that is done: not live, not retired already, its worktree
  committed (``--force`` saves the unsaved files on a rescue ref first).
- ``unretire`` needs a ``retired`` node whose branch still exists.
- ``delete`` would lose commits not merged into the node's target and unsaved files:
  both are listed and refused unless ``--force`` (which writes a rescue ref first).
- ``reset`` and ``destroy`` refuse while any node of the tree is live.
- Only the operator at the root, or an ancestor of the node, may retire or delete it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from fractal.domain import authority
from fractal.domain.states import Status

__all__ = [
    "MAX_LISTED",
    "Cleanup",
    "NodeFacts",
    "authority_refusal",
    "deepest_first",
    "delete_refusal",
    "is_missing",
    "live_refusal",
    "previous_status",
    "recovered_status",
    "restored_status",
    "retire_note",
    "retire_refusal",
    "tree_refusal",
    "unretire_refusal",
    "vanish_note",
]

MAX_LISTED = 20
"""How many files or commits a refusal lists before ``... and N more``."""

_LIVE = frozenset({Status.ACTIVE.value, Status.PAUSED.value})
_RESTORABLE = frozenset({Status.IDLE.value, Status.COMPLETED.value, Status.STOPPED.value,
                         Status.EXITED.value, Status.KILLED.value})
_RECOVERABLE = _RESTORABLE | {Status.RETIRED.value}


class Cleanup(StrEnum):
    """The destructive verbs; each value is also the ``operation`` of its rescue rows."""

    RETIRE = "retire"
    DELETE = "delete"
    RESET = "reset"
    DESTROY = "destroy"
    CONTINUE_CLEAN = "continue --clean"
    MERGE_RESTORE = "merge restore"


@dataclass(frozen=True)
class NodeFacts:
    """What a cleanup verb knows about one node before it acts.

    ``booting`` is an ``idle`` node whose tmux session is alive (or could not be told
    gone); ``dirty`` the worktree's unsaved paths; ``unmerged`` the subjects of the
    branch's commits its target does not contain, newest first; ``target`` that target
    (the node's ``base``, else its parent's branch).
    """

    branch: str
    status: str
    worktree_exists: bool = True
    branch_exists: bool = True
    booting: bool = False
    dirty: tuple[str, ...] = ()
    unmerged: tuple[str, ...] = ()
    target: str = ""

    @property
    def live(self) -> bool:
        return self.status in _LIVE or (self.status == Status.IDLE.value and self.booting)


def _listing(items: Sequence[str]) -> str:
    shown = "\n  ".join(items[:MAX_LISTED])
    more = f"\n  ... and {len(items) - MAX_LISTED} more" if len(items) > MAX_LISTED else ""
    return f"\n  {shown}{more}"


def live_refusal(facts: NodeFacts, verb: str) -> str | None:
    """The refusal for ``verb`` on a live node, or None when it is not live."""
    if not facts.live:
        return None
    state = "booting" if facts.status == Status.IDLE.value else facts.status
    return (f"node {facts.branch} is {state}; `fractal node stop {facts.branch}` (or "
            f"`kill`) it and wait for it to settle before you {verb} it")


def is_missing(facts: NodeFacts) -> bool:
    """A node whose branch vanished, or whose worktree vanished while it is not retired
    (a retired node has no worktree on purpose)."""
    if not facts.branch_exists:
        return True
    return not facts.worktree_exists and facts.status != Status.RETIRED.value


def retire_refusal(facts: NodeFacts, *, force: bool) -> str | None:
    """Why ``retire`` must not act on this node (one of a subtree), or None."""
    if facts.status == Status.RETIRED.value:
        return f"node {facts.branch} is already retired; `fractal node unretire` brings it back"
    live = live_refusal(facts, "retire")
    if live:
        return live
    if is_missing(facts):
        return (f"node {facts.branch} is missing (its worktree or branch is gone); "
                f"`fractal node delete {facts.branch}` deregisters it")
    if facts.dirty and not force:
        return (f"node {facts.branch} has uncommitted files; commit them (`fractal commit`), "
                f"or pass --force to save them on a rescue ref and retire anyway:"
                f"{_listing(facts.dirty)}")
    return None


def unretire_refusal(facts: NodeFacts) -> str | None:
    """Why ``unretire`` must not act on this node, or None."""
    if facts.status != Status.RETIRED.value:
        return f"node {facts.branch} is {facts.status}, not retired; nothing to unretire"
    if not facts.branch_exists:
        return (f"the branch of retired node {facts.branch} is gone, so its worktree cannot "
                f"be re-created; `fractal node delete {facts.branch}` deregisters it")
    return None


def delete_refusal(facts: NodeFacts, *, force: bool) -> str | None:
    """Why ``delete`` must not act on this node (one of a subtree), or None.

    Unmerged commits and unsaved files are listed together; ``force`` overrides them (the
    caller writes a rescue ref first), never a live node.
    """
    live = live_refusal(facts, "delete")
    if live:
        return live
    if force or (not facts.unmerged and not facts.dirty):
        return None
    parts: list[str] = []
    if facts.unmerged:
        parts.append(f"{len(facts.unmerged)} commit(s) not merged into "
                     f"{facts.target or 'its target'}:{_listing(facts.unmerged)}")
    if facts.dirty:
        parts.append(f"{len(facts.dirty)} uncommitted file(s):{_listing(facts.dirty)}")
    return (f"deleting {facts.branch} would lose " + "\n".join(parts) +
            "\n" + _next_step(facts) + ", or pass --force to save everything on a rescue "
            "ref and delete anyway")


def _next_step(facts: NodeFacts) -> str:
    """What saves the work a delete would lose: commit the files, merge the commits."""
    steps = []
    if facts.dirty:
        steps.append(f"commit the files (`fractal commit MESSAGE` in {facts.branch}'s "
                     "worktree)")
    if facts.unmerged or facts.dirty:
        steps.append(f"merge it (`fractal node merge {facts.branch}`)")
    return "first " + ", then ".join(steps)


def tree_refusal(nodes: Iterable[NodeFacts], verb: str) -> str | None:
    """Why ``reset``/``destroy`` (``verb``) must not act on the tree, or None: any live
    node refuses it, and every live node is named."""
    live = [f for f in nodes if f.live]
    if not live:
        return None
    names = ", ".join(f"{f.branch} ({'booting' if f.status == Status.IDLE.value else f.status})"
                      for f in live)
    return (f"{len(live)} node(s) still live: {names}; stop or kill them "
            f"(`fractal node kill NODE`) before you {verb} the tree")


def authority_refusal(caller: str, target: str, root: str, verb: str) -> str | None:
    """Who may ``verb`` (retire, delete) ``target``: the operator at the root, or an
    ancestor of ``target`` (from inside its own loop, a node acts on its descendants only).
    Returns the rule as the refusal, or None when ``caller`` may."""
    return authority.refusal(verb, acting=caller, target=target, root=root)


def deepest_first(branches: Iterable[str]) -> list[str]:
    """``branches`` ordered for teardown: deepest level first, then by name (children go
    before their parents)."""
    return sorted(set(branches), key=lambda b: (-b.count("."), b))


def vanish_note(previous: str, gone: str) -> str:
    """The metadata of the ``orphan`` event a missing node gets: ``was <status>: its
    <worktree|branch> is gone`` (``previous_status`` reads the status back)."""
    return f"was {previous}: its {gone} is gone"


def recovered_status(previous: str | None) -> str:
    """The status a missing node gets back when its worktree and branch return: the one
    recorded when it went missing (retired included), else ``idle``."""
    return previous if previous in _RECOVERABLE else Status.IDLE.value


def restored_status(previous: str | None) -> str:
    """The status ``unretire`` gives back: the one recorded at retire time when it is a
    status a node can rest in (idle or settled), else ``idle``."""
    return previous if previous in _RESTORABLE else Status.IDLE.value


def retire_note(previous: str, reason: str | None) -> str:
    """The metadata of a ``retire`` event: ``was <status>``, then ``: <reason>``; the
    status is what ``unretire`` restores (``previous_status`` reads it back)."""
    return f"was {previous}" + (f": {reason}" if reason else "")


def previous_status(note: str) -> str | None:
    """The status a ``retire`` event's metadata recorded (``was completed: ...`` ->
    ``completed``), or None when it records none."""
    if not note.startswith("was "):
        return None
    word = note[4:].split(":", 1)[0].strip()
    return word or None
