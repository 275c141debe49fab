"""The rules of ``fractal node merge``: who may merge what, when it is refused, what travels,
and how the squash commit reads. Pure: facts in, a refusal (or text) out.

What travels: a path travels onto the target unless it lies under ``.fractal/`` (every
node directory: the merged nodes' own and their children's never land, and the target's
own stays exactly as the target has it) or is a runtime artifact (decided by the caller,
which owns that list).

Who may merge: the operator (acting at the tree's root) any node; a node, from inside its
loop or its worktree, only its own direct children, and only into itself.

When it is refused (each with the next step): the target's worktree with tracked changes
outside its node directory (untracked files stay where they are, unless the merge would
write over one), or a merge/rebase/cherry-pick/revert in progress there; the node active or
paused; the target active or paused, unless the caller is the target's own loop (its agent
merging a settled child from inside a step); with ``force`` unset, the node's last run
left a gated step never approved (a finish, stop, kill, crash heal or time wall that
ended the run at a waiting gate; named before the next rule), or ended ``exited`` (unless
it landed on its budget, or it ended on a conflict handed back that the node has
concluded since), or the node's subtree
still holds work that never reached it: a descendant with a conflict handed back and not
merged since, or a settled descendant whose work never merged into its own parent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fractal.domain import authority

__all__ = [
    "BODY_SUBJECTS",
    "FORCE_HINT",
    "LIVE",
    "NODE_DIRS",
    "RUNNING_STATUSES",
    "UNMERGED_EVENT",
    "MergeFacts",
    "authorisation_refusal",
    "merge_body",
    "merge_refusal",
    "merge_subject",
    "travels_by_place",
    "unmerged_label",
    "unresolved_hand_back",
    "view_refusal",
]

NODE_DIRS = ".fractal"
"""The top-level directory holding every node directory; nothing under it travels."""
BODY_SUBJECTS = 50
"""Most child commit subjects a squash commit's body lists."""
STAT_LINES = 20
"""Most diffstat file lines a squash commit's body carries."""
LIVE = frozenset({"active", "paused"})
"""Statuses of a node whose loop is (or may come back) running."""
FORCE_HINT = "merge with --force to take it"
"""The words every refusal that ``--force`` overrides (a gate never approved, a broken
run, a subtree's work left out) ends with; the inbox offers the forced merge on them."""

def travels_by_place(path: str) -> bool:
    """Tell whether repo-relative ``path`` may land on a target (not under ``.fractal/``)."""
    clean = path.strip("/")
    return not (clean == NODE_DIRS or clean.startswith(NODE_DIRS + "/"))


def authorisation_refusal(*, caller: str, root: str, child: str, child_parent: str | None,
                          target: str, verb: str = "merge") -> str | None:
    """Why ``caller`` may not ``verb`` ``child`` into ``target``, or None when it may.

    The root (the operator) may act on any node. A node may act only on its own direct
    children (``child_parent == caller``), and for a merge only into itself.
    """
    why = authority.refusal(verb, acting=caller, target=child, root=root)
    if why is not None or caller == root:
        return why
    if verb == "merge" and target != caller:
        return (f"{caller} may merge its children only into itself, not into {target}; the "
                "operator at the root may merge anywhere")
    return None


def view_refusal(*, caller: str, root: str, node: str, verb: str = "diff") -> str | None:
    """Why ``caller`` may not look at ``node``'s pending merge (``node diff``, ``node
    conflicts``), or None: the operator at the root sees every node, a node only itself
    (``conflicts`` of its own children) and its descendants."""
    return authority.refusal(verb, acting=caller, target=node, root=root)


@dataclass(frozen=True)
class MergeFacts:
    """What the merge refusal rules look at.

    ``child_status`` and ``target_status`` are registry statuses (``target_status`` None
    for the root or a plain branch); ``last_run_status`` is the child's newest run's status
    (None: never ran); ``unapproved_gate`` names a gated step that run left waiting;
    ``target_dirty`` lists the target worktree's changed paths outside its node directory;
    ``target_operation`` is a git operation in progress there; ``caller_is_target_loop``
    is True when the target's own loop (its agent) runs the merge. A last run that ended
    ``exited`` is refused (a breakdown) unless it was a ``budget_landing``.
    """

    child: str
    target: str
    child_status: str
    target_status: str | None
    last_run_status: str | None
    unapproved_gate: str | None
    target_dirty: Sequence[str] = ()
    target_operation: str | None = None
    caller_is_target_loop: bool = False
    force: bool = False
    budget_landing: bool = False
    """The last run ``exited`` at exit 0: it landed on its cost budget, a planned wind-down
    whose work was committed, not a breakdown."""
    handed_back: bool = False
    """A conflict handed back to the child is still there: its branch lacks the target's
    tip the hand-back brought, or its worktree still has the merge in progress or
    unmerged paths."""
    hand_back_resolved: bool = False
    """A conflict was handed back and the child has concluded it since (its branch holds
    the target's tip the hand-back brought, no merge in progress, no unmerged path): a
    last run that ended ``exited`` on that conflict does not refuse the merge."""
    unmerged_below: tuple[str, ...] = ()
    """The child's descendants whose work has not reached the child, each labelled by
    ``unmerged_label``: a hand-back not merged since, or a settled descendant's work never
    merged into its parent. Read only when ``force`` is unset."""


def _listing(paths: Sequence[str], cap: int = 10) -> str:
    shown = ", ".join(paths[:cap])
    return shown if len(paths) <= cap else f"{shown} ... and {len(paths) - cap} more"


def merge_refusal(facts: MergeFacts) -> str | None:
    """The first rule (see the module docstring) that refuses the merge, or None."""
    child, target = facts.child, facts.target
    if facts.child_status in LIVE:
        return (f"{child} is {facts.child_status}; merge a settled node: finish or stop it "
                f"first (`fractal node finish {child}`) and merge once it has ended")
    if facts.target_status in LIVE and not facts.caller_is_target_loop:
        return (f"the target {target} is {facts.target_status}; only its own loop may merge "
                "into it while it runs: let its agent run the merge, or stop it first")
    if facts.target_operation is not None:
        return (f"a {facts.target_operation} is in progress in {target}'s worktree; conclude "
                f"it or abandon it (`git {facts.target_operation} --abort`) and merge again")
    if facts.target_dirty:
        return (f"{target}'s worktree has uncommitted changes outside its node directory: "
                f"{_listing(facts.target_dirty)}; commit them (`fractal commit MESSAGE` in a "
                "node, git at the root) or stash them, then merge again")
    if facts.force:
        return None
    if facts.last_run_status == "exited" and facts.handed_back:
        return (f"{child} still holds the conflict handed back to it (its last run ended "
                f"exited without resolving it); run it again to resolve it "
                f"(`fractal node start --continue {child}`), or resolve and commit it by hand "
                f"in its worktree, then merge again (--force skips this check, but the "
                f"branch still lacks the resolution, so the merge meets the conflict again)")
    if facts.unapproved_gate is not None:  # whatever ended the run: a finish, a kill, a heal
        return (f"{child}'s last run ended ({facts.last_run_status}) with "
                f"{facts.unapproved_gate} never approved; review it (`fractal node diff "
                f"{child}`), then {FORCE_HINT} anyway")
    if facts.last_run_status == "exited" and not facts.budget_landing and \
            not facts.hand_back_resolved:
        return (f"{child}'s last run ended exited (it broke down, its work may be half "
                f"done); look at `fractal node activity {child}`, then {FORCE_HINT} anyway")
    if facts.unmerged_below:
        return (f"{child}'s subtree holds work that never reached {child}: "
                f"{_listing(facts.unmerged_below, 5)}; merge each into its parent first "
                "(deepest first: `fractal node merge NAME`; a handed-back node once it has "
                "resolved the conflict, a running one once its run has ended), then merge "
                f"{child} again, or {FORCE_HINT} without that work")
    return None


UNMERGED_EVENT = "unmerged"
"""The event that books a node's subtree work never merged into it: a ``completed`` run's
end books the labels it found (``unmerged_label``, joined by ``; ``), and a merge landing
in that node afterwards books them again as they now stand (none: the work is all in)."""


RUNNING_STATUSES = ("active", "paused")
"""Descendant statuses whose work cannot have reached the node yet: its run still goes."""


def unmerged_label(branch: str, status: str, *, handed_back: bool, target: str) -> str:
    """How the subtree refusal names one descendant: ``main.a.b (active, still running)``
    for one whose run still goes (``RUNNING_STATUSES``: its work is not in, whatever it
    holds now), ``main.a.b (a conflict handed back to it, not merged since)`` or
    ``main.a.b (completed, its work never merged into main.a)``."""
    if status in RUNNING_STATUSES:
        return f"{branch} ({status}, still running)"
    if handed_back:
        return f"{branch} (a conflict handed back to it, not merged since)"
    return f"{branch} ({status}, its work never merged into {target})"


def unresolved_hand_back(child: str, target: str, worktree: str) -> str:
    """What to do when ``child``'s ``worktree`` still holds the merge of ``target`` handed
    back to it, unresolved, and no loop of the child is at it: a second hand-back is
    refused there, and a plain merge conflicts again until the merge is concluded."""
    return (f"{child}'s worktree {worktree} still holds the unresolved merge of {target} "
            f"handed back to it: resolve the conflicted files there and `git commit "
            f"--no-edit`, then `fractal node merge {child}`; or let its loop resolve it: "
            f"`fractal node start {child} --continue`")


def merge_subject(target: str, child: str, title: str | None) -> str:
    """``<target>: merge <child> (<title>)`` (the child's short name when it has no title)."""
    label = (title or "").strip().splitlines()[0] if (title or "").strip() else \
        child.rsplit(".", 1)[-1]
    return f"{target}: merge {child} ({label})"


def merge_body(subjects: Sequence[str], diffstat: Sequence[str],
               cap: int = BODY_SUBJECTS, stat_cap: int = STAT_LINES) -> str:
    """The squash commit's body: the child's commit subjects (newest first, at most
    ``cap``), a blank line, the diffstat (at most ``stat_cap`` file lines plus its summary).

    ``diffstat`` is ``git diff --stat`` output split in lines, its summary line last.
    """
    parts: list[str] = []
    if subjects:
        lines = [f"- {s}" for s in subjects[:cap]]
        if len(subjects) > cap:
            lines.append(f"- ... and {len(subjects) - cap} more commits")
        parts.append("\n".join(lines))
    stat = [line.rstrip() for line in diffstat if line.strip()]
    if stat:
        files, summary = stat[:-1], stat[-1:]
        if len(files) > stat_cap:
            files = [*files[:stat_cap], f" ... {len(files) - stat_cap} more files"]
        parts.append("\n".join(files + summary))
    return "\n\n".join(parts)
