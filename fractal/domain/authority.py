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
    ``update`` and ``config set --node``, ``diff``, ``conflicts``, ``spawn`` under a
    parent: a node may wind down or retune its own loop (only tighter:
    ``domain.selflimits``), or look at its own pending merge, but never a sibling's or
    an ancestor's).
  - ``SELF``: the target is the acting node (``commit``, ``config set``, ``pool
    result``, ``done``: a node's own worktree, its own config, its own answer, the end of
    its own run; ``done`` names no target, and the root, which has no run, may not).
  - ``OPERATOR``: only the operator (the tree-wide verbs ``reset``, ``destroy``, the
    brake and its release, the notify command, ``inbox ack``, ``usage reopen``: each
    acts for the whole tree or runs a command as the operator).

Not in the table: reads (``status``, ``list``, ``activity``, ``cost``, ``pending``,
``inbox``, the dashboard), open to every caller; ``plan`` and ``wiki update``, which act
on the acting node by construction; ``rescue list/restore``, which work on the
repository even after its tree is destroyed (``restore --as`` spawns, and is authorised
as ``spawn``); and the radio, whose channels have their own write rules
(``fractal.domain.radio``: a node reports up to its parent and down to its children).

Who the acting node is, when processes are involved (``acting_node``, ``posing``): a
process that descends from a node's live supervisor acts as that node whatever it claims
(a supervisor is a child subreaper, so an agent's descendants stay below it). Its claim
is the loop's variable (``_NODE``) when set, else its position (``--path``); a claim that
names another node is refused, never silently corrected. A process below no supervisor
(the operator's shell, a cron job) acts as its claim, exactly as before.

``refusal`` and ``posing`` are pure: they name the rule and what to do next, or return
None.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import Enum
from types import MappingProxyType

__all__ = ["CREATE_TIME_TOLERANCE", "RULES", "Relation", "acting_node", "is_below",
           "loop_by_ancestry", "parent_of", "posing", "refusal", "relation_of", "spoken"]


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
    "done": Relation.SELF,
    # acting for the whole tree
    "reset": Relation.OPERATOR,
    "destroy": Relation.OPERATOR,
    "brake": Relation.OPERATOR,
    "release": Relation.OPERATOR,
    "notify": Relation.OPERATOR,
    "ack": Relation.OPERATOR,
    "usage reopen": Relation.OPERATOR,
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


CREATE_TIME_TOLERANCE = 0.01
"""Seconds two readings of one process's create time may differ by."""


def loop_by_ancestry(chain: Sequence[tuple[int, float | None]],
                     supervisors: Mapping[int, tuple[str, float]]) -> str | None:
    """The node whose supervisor is the nearest of ``chain`` (a process's ancestors,
    nearest first, as ``(pid, create time in epoch seconds)``), or None when none is.
    ``supervisors`` maps each recorded supervisor pid to ``(node, its create time)``; a
    pid matches only when the create times agree (a recycled pid is someone else)."""
    for pid, created in chain:
        known = supervisors.get(pid)
        if (known is not None and created is not None
                and abs(created - known[1]) <= CREATE_TIME_TOLERANCE):
            return known[0]
    return None


def acting_node(process: str | None, loop: str | None, caller: str) -> str:
    """Who acts: ``process`` (the node whose supervisor the process descends from) when
    there is one, else the node ``loop`` names (``_NODE``), else ``caller`` (``--path``).
    Pair it with ``posing``, which refuses a claim that disagrees with ``process``."""
    return process or loop or caller


def posing(process: str | None, loop: str | None, caller: str, *, root: str,
           variable: str = "_NODE") -> str | None:
    """Why a process's claim is refused, or None when it holds. ``process`` is the node
    whose supervisor it descends from (None: below no supervisor, the claim holds);
    ``loop`` the node its ``variable`` names (None when unset); ``caller`` the node its
    ``--path`` lies in (``root``: the main checkout). Under ``process``'s supervisor the
    claim must be ``process``: ``loop`` when set, else ``caller``."""
    if process is None:
        return None
    under = f"this process runs under {process}'s supervisor, so it acts as {process}"
    if loop is not None:
        if loop == process:
            return None
        return (f"{under}, but {variable} names {loop}; a node's agent acts only as its own "
                f"node: keep {variable} as the loop set it, or ask {loop}'s parent or the "
                "operator to act")
    if caller == process:
        return None
    where = "the main checkout (the operator's place)" if caller == root else caller
    return (f"{under}, but {variable} is unset and --path places it at {where}; a node's "
            f"agent acts only as its own node: keep {variable} as the loop set it, or ask "
            "the operator to act")
