"""Who may act on whom: each verb and the relation its acting node needs to its target.

The rule, for every verb that changes something:

* The operator (the caller at the tree's root, outside any node's loop) may act on any
  node.
* A node (its agent, a tool the agent runs, or a shell in its worktree) may act only
  where ``RULES`` lets it, measured from the acting node to the target:

  - ``CHILD``: the target's parent is the acting node (``approve``, ``merge``: the
    parent reviews and takes in its own children's work).
  - ``DESCENDANT``: the target lies strictly below the acting node (``retire``,
    ``unretire``, ``delete``, pool management: a node never removes itself or a node
    beside or above it).
  - ``SUBTREE``: the target is the acting node or lies below it (the steering verbs,
    ``update``, ``diff``, ``conflicts``, ``spawn`` under a parent: a node may wind down
    or retune its own loop, or look at its own pending merge, but never a sibling's or
    an ancestor's).
  - ``SELF``: the target is the acting node (``commit``, ``config set``, ``pool
    result``: a node's own worktree, its own config, its own answer).
  - ``OPERATOR``: only the operator (the tree-wide verbs ``reset``, ``destroy``, the
    brake and its release, the notify command, ``inbox ack``: each acts for the whole
    tree or runs a command as the operator).

Not in the table: reads (``status``, ``list``, ``activity``, ``cost``, ``pending``,
``inbox``, the dashboard), open to every caller; ``plan`` and ``wiki update``, which act
on the acting node by construction; ``rescue list/restore``, which work on the
repository even after its tree is destroyed (``restore --as`` spawns, and is authorised
as ``spawn``); and the radio, whose channels have their own write rules
(``fractal.domain.radio``: a node reports up to its parent and down to its children).

``refusal`` is pure: it names the rule and what to do next, or returns None.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from types import MappingProxyType

__all__ = ["RULES", "Relation", "is_below", "parent_of", "refusal", "relation_of", "spoken"]


class Relation(Enum):
    """What the acting node must be to the target."""

    CHILD = "child"
    DESCENDANT = "descendant"
    SUBTREE = "subtree"
    SELF = "self"
    OPERATOR = "operator"


RULES: Mapping[str, Relation] = MappingProxyType({
    # a parent's review and take-in of its children's work
    "approve": Relation.CHILD,
    "merge": Relation.CHILD,
    # removing nodes: never oneself, never a node beside or above
    "retire": Relation.DESCENDANT,
    "unretire": Relation.DESCENDANT,
    "delete": Relation.DESCENDANT,
    "pool": Relation.DESCENDANT,
    "pool status": Relation.DESCENDANT,
    "pool reject": Relation.DESCENDANT,
    # steering and retuning a loop: one's own or a descendant's
    "stop": Relation.SUBTREE,
    "finish": Relation.SUBTREE,
    "finish_cancel": Relation.SUBTREE,
    "pause": Relation.SUBTREE,
    "resume": Relation.SUBTREE,
    "kill": Relation.SUBTREE,
    "start": Relation.SUBTREE,
    "attach": Relation.SUBTREE,
    "update": Relation.SUBTREE,
    "spawn": Relation.SUBTREE,
    "diff": Relation.SUBTREE,
    "conflicts": Relation.SUBTREE,
    # a node's own files and answers
    "commit": Relation.SELF,
    "config": Relation.SELF,
    "pool result": Relation.SELF,
    # acting for the whole tree
    "reset": Relation.OPERATOR,
    "destroy": Relation.OPERATOR,
    "brake": Relation.OPERATOR,
    "release": Relation.OPERATOR,
    "notify": Relation.OPERATOR,
    "ack": Relation.OPERATOR,
})
"""Every verb that changes something -> the relation the acting node needs."""


_SPOKEN = {"finish_cancel": "finish --cancel"}


def spoken(verb: str) -> str:
    """How a refusal names ``verb``: the command's own words (``finish --cancel``)."""
    return _SPOKEN.get(verb, verb)


def parent_of(branch: str) -> str | None:
    """The dotted parent of ``branch`` (None for a branch without a dot)."""
    head, dot, _ = branch.rpartition(".")
    return head if dot else None


def is_below(branch: str, ancestor: str) -> bool:
    """True when ``branch`` lies strictly below ``ancestor`` in the dotted lineage."""
    return branch.startswith(ancestor + ".")


def relation_of(acting: str, target: str) -> Relation | None:
    """The closest relation ``acting`` has to ``target``: SELF, CHILD (the target is its
    direct child), DESCENDANT (deeper), or None (a sibling, an ancestor, a stranger)."""
    if acting == target:
        return Relation.SELF
    if parent_of(target) == acting:
        return Relation.CHILD
    if is_below(target, acting):
        return Relation.DESCENDANT
    return None


def _holds(needed: Relation, have: Relation | None) -> bool:
    if needed is Relation.OPERATOR or have is None:
        return False
    if needed is Relation.SUBTREE:
        return True
    if needed is Relation.DESCENDANT:
        return have in (Relation.CHILD, Relation.DESCENDANT)
    return have is needed


def refusal(verb: str, *, acting: str, target: str, root: str) -> str | None:
    """Why ``acting`` may not ``verb`` ``target`` in the tree rooted at ``root``, or None
    when it may. ``acting == root`` is the operator. Raises KeyError for a verb that is
    not in ``RULES`` (a verb must be given a rule before it can be authorised)."""
    needed = RULES[verb]
    if acting == root or _holds(needed, relation_of(acting, target)):
        return None
    verb = spoken(verb)
    outside = "run it from the main checkout, outside any node's loop"
    if needed is Relation.OPERATOR:
        return (f"only the operator at the root may {verb}: it is the operator's, acting for "
                f"the whole tree, and {acting} is a node; {outside}")
    if needed is Relation.CHILD:
        parent = parent_of(target) or root
        return (f"{acting} may {verb} only its own direct children, and {target} is not one: "
                f"only {parent} (its parent) or the operator at the root may {verb} it")
    if needed is Relation.DESCENDANT:
        return (f"only the operator (at the root) or an ancestor of {target} may {verb} it; "
                f"{acting} is neither; {outside}, or from an ancestor's loop")
    if needed is Relation.SUBTREE:
        return (f"{acting} may {verb} only itself and its own descendants, and {target} is "
                f"not one; the operator at the root or an ancestor of {target} may {verb} "
                "it")
    return (f"{acting} may {verb} only for itself, not for {target}; run it in {target}'s "
            f"own worktree or loop, or as the operator at the root")
