"""A node's private git objects taken into the shared store before a verb writes from its
content: ``node merge`` (and the hand-back it may make), the rescue ref every destructive
verb writes first (``delete``, ``retire``, ``reset``, ``destroy``, ``start --continue
--clean``).

The rule (docs/security.md, "adoption"): such a verb's git reads the shared store alone
(``workspace.gitguard``: no private object dir as an alternate), so it first adopts the
node's private objects (``workspace.adoption.adopt``, every object checked), then checks
that the tip of the node's branch (its loose ref file: the only kind an agent can
write) reads whole from the shared store (``adoption.reads_whole``). A
branch that needs an object adoption refused, or one the store does not hold, is a
refusal: nothing is written, and the text says what was refused and what to do. A ref is
never written to content adoption has not checked.

While the node's launch may live (its status ``active``, ``paused`` or ``idle``, or
unknown) the adoption is a snapshot: the private dir stays as it is, as the relay's
adoption before a command. A settled node's private dir is emptied once all of it was
adopted; refused files stay there for the node's supervisor to record and to set the
branch back from at its next start (``runtime.sandboxing``).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from fractal.domain.sandbox import private_objects
from fractal.domain.states import UNSETTLED, Status
from fractal.tree import Tree
from fractal.workspace.adoption import adopt, reads_whole
from fractal.workspace.gitfiles import git_dirs, holds_any, loose_ref

__all__ = ["Taken", "take_objects"]

SHOWN = 3
"""Refused files named in a refusal (the rest are counted)."""


class Taken(NamedTuple):
    """What ``take_objects`` found: ``adopted`` objects and packs, and ``refusal``, why
    nothing may be written from the node's branch ("" when it may)."""

    adopted: int
    refusal: str


def take_objects(tree: Tree, node: str, status: Status | None, operation: str, *,
                 besides: str | None = None, always_check: bool = True) -> Taken:
    """Adopt ``node``'s private objects into the shared store before ``operation`` (the
    verb's name, for the refusal) writes from its branch, and check that
    ``refs/heads/<node>`` reads whole from the shared store (the commits also reachable
    from ``besides``, a trusted ref such as a merge's target, are not walked again).
    ``status`` is the node's (None: unknown), which says whether its launch may live (the
    module docstring). With ``always_check`` False the branch is checked only when the
    private dir held anything (a walk of the whole history costs more). Never raises for
    what the agent left; an OSError writing the shared store propagates."""
    worktree = tree.worktree_of(node)
    dirs = git_dirs(worktree) if worktree.is_dir() else None
    if dirs is None:
        return Taken(0, "")  # no worktree: no private dir (it went with the worktree)
    git_dir, common = dirs
    private = Path(private_objects(str(common), str(git_dir), str(tree.node(node).node_dir)))
    held = holds_any(private)
    if not held and not always_check:
        return Taken(0, "")
    settled = status is not None and status not in UNSETTLED
    done = adopt(private, common, drain=False) if held else None
    if done is not None and settled and not done.refused:
        adopt(private, common, drain=True)  # all of it is in: nothing left to read there
    adopted = 0 if done is None else done.adopted
    tip = loose_ref(worktree, node)
    if tip is None:  # absent, or packed (never by an agent: packed-refs is read-only to
        return Taken(adopted, "")  # it): the caller's own checks answer
    if reads_whole(common, tip[1], besides=besides):
        return Taken(adopted, "")
    return Taken(adopted, _refusal(node, operation, worktree,
                                   () if done is None else done.refused, status))


def _refusal(node: str, operation: str, worktree: Path, refused: tuple[str, ...],
             status: Status | None) -> str:
    """Why ``operation`` may not write from ``node``'s branch, and what to do."""
    if refused:
        names = "; ".join(refused[:SHOWN]) + (
            f"; and {len(refused) - SHOWN} more" if len(refused) > SHOWN else "")
        what = f"git objects its agent wrote that adoption refused ({names})"
    else:
        what = ("git objects the shared store does not hold (a launch may still be "
                "writing them)")
    if status is Status.ACTIVE:
        again = ("Its supervisor adopts what it can once the running launch ends and sets "
                 "the branch back to its last whole commit: wait for that")
    else:
        verb = (f"`fractal node resume {node}`" if status is Status.PAUSED
                else f"`fractal node start {node} --continue`")
        again = (f"Run it again ({verb}): its supervisor adopts what it can at start and "
                 "sets the branch back to its last whole commit")
    return (f"{node}'s branch needs {what}; nothing was written for the {operation}. "
            f"{again}. Or set it back yourself (`git reset --mixed SHA` in {worktree}, a "
            f"commit `git reflog {node}` lists), then retry the {operation}")

