"""What a node's relay runs for its sandboxed agent: which verbs, and how the paths in
them are treated. Pure rules on an argv (a list of str); no I/O.

A relayed verb runs as the supervisor, outside the agent's sandbox and PID namespace, so
a path the agent names there would be opened with the operator's view of the machine
(``/proc/<pid>/environ`` of any process of the user, another tree's worktree). Hence:

- only the verbs of ``RELAYED_VERBS`` run (what the agent protocol tells an agent to use,
  and the operator's tree-wide verbs whose own authority check refuses a node and records
  it); a hidden verb (``node _run``, ``_notify``), ``node attach`` or another operator's
  verb (``init``, ``open``, ``db``, ``doctor``, ``rescue``, ``demo``) is refused;
- a file option (``FILE_OPTIONS``: ``--task-file``, ``--items``, ``--brief``) is read by
  the relay client inside the sandbox and its content sent; the relay never opens the
  path itself;
- ``--path`` must name the node's own worktree or a directory in it (the relay checks);
- a positional path (``wiki update DIRECTORY``) is refused;
- the verb acts in the relay's own tree, as the relay's node: the directory the agent
  sent may not lie in another repository inside the worktree (``foreign_repository``:
  a nested repository, a ``.git`` file naming another repository's git dir, a git dir
  itself), the verb runs in the worktree (whose ``.git`` the sandbox keeps read-only),
  and its environment is the launch's with the node's own ``_NODE`` and none of the
  relay's variables (``verb_env``): the agent's ``_NODE`` claim is never read, and the
  token never reaches a process the verb starts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:  # the relay client imports this module on every sandboxed command
    from pathlib import PurePath

__all__ = ["FILE_OPTIONS", "HELP_WORDS", "IDENTITY_ENV", "PATH_OPTION", "RELAYED_VERBS",
           "PathValue", "foreign_repository", "path_values", "verb_env", "verb_refusal"]

IDENTITY_ENV = "_NODE"  # lifecycle.context.LOOP_NODE_ENV: who the verb acts as

HELP_WORDS = frozenset({"--help", "-h", "--version"})
# verb -> the sub-verbs an agent may ask for (empty: the verb takes none)
RELAYED_VERBS: dict[str, frozenset[str]] = {
    "commit": frozenset(),
    "node": frozenset({
        "activity", "approve", "checks", "config", "conflicts", "cost", "delete", "diff",
        "done", "finish", "init", "kill", "list", "merge", "pause", "pending", "pool",
        "resume", "retire", "start", "status", "stop", "unretire", "update"}),
    "radio": frozenset({"feed", "messages", "post", "read", "reply", "save", "send", "sent",
                        "thread", "unsave", "unsend"}),
    "plan": frozenset({"init", "list"}),
    "pool": frozenset({"dispatch", "reject", "result", "status"}),
    "wiki": frozenset({"update"}),
    "usage": frozenset({"list", "reopen"}),
    # the operator's tree-wide verbs: their own authority check refuses a node and
    # records the refusal under the verb's event (brake, release, reset, destroy, ...)
    "pause": frozenset(),
    "resume": frozenset(),
    "reset": frozenset(),
    "destroy": frozenset(),
    "inbox": frozenset({"ack", "notify"}),
}
FILE_OPTIONS = ("--task-file", "--items", "--brief")  # read in the sandbox, content sent
PATH_OPTION = "--path"  # resolved by the relay, inside the node's worktree only
_POSITIONAL_PATHS = {("wiki", "update")}  # verbs whose positional argument is a path


class PathValue(NamedTuple):
    """One path an argv names through an option: ``position`` of the token holding the
    value, the ``option`` (``--task-file``...), the ``value``, and whether it was written
    ``--option=value`` in one token (``inline``)."""

    position: int
    option: str
    value: str
    inline: bool


def verb_refusal(argv: Sequence[str]) -> str | None:
    """Why the relay refuses to run ``argv`` for an agent, or None when it may. The rule:
    the first word is a verb of ``RELAYED_VERBS`` (or only help: ``--help``,
    ``--version``, nothing), and a verb with sub-verbs is followed by one of them (or by
    help); ``wiki update`` takes no DIRECTORY through the relay."""
    if not argv or argv[0] in HELP_WORDS:
        return None
    verb = argv[0]
    allowed = RELAYED_VERBS.get(verb)
    if allowed is None:
        return (f"`fractal {verb}` is not a verb a node's agent may run (it may run: "
                f"{', '.join(sorted(RELAYED_VERBS))}); ask your operator to run it")
    if not allowed:
        return None
    if len(argv) < 2 or argv[1] in HELP_WORDS:
        return None
    sub = argv[1]
    if sub not in allowed:
        return (f"`fractal {verb} {sub}` is not a verb a node's agent may run (under "
                f"`{verb}` it may run: {', '.join(sorted(allowed))})")
    if (verb, sub) in _POSITIONAL_PATHS and _positionals(argv[2:]):
        return (f"`fractal {verb} {sub}` takes no directory through the relay; run it "
                "without one (it updates this node's project and memory wikis)")
    return None


def foreign_repository(sent: PurePath, worktree: PurePath,
                       marked: Sequence[PurePath]) -> str | None:
    """Why the directory ``sent`` (resolved) is not a place of the node's worktree
    (resolved) a relayed verb may come from, or None when it is. ``marked``: the
    directories from ``sent`` up to the worktree (the worktree itself excluded) that hold
    a ``.git`` entry or are a git dir themselves (``HEAD``, ``objects``, ``refs``). The
    rule: a directory outside the worktree is fine (the verb runs in the worktree
    anyway); inside it, no directory at or above ``sent`` below the worktree may be
    marked, since git would find another repository there (a tree of the agent's making,
    or another tree on the machine)."""
    if sent != worktree and worktree not in sent.parents:
        return None
    inside = [place for place in marked if place == sent or place in sent.parents]
    if not inside:
        return None
    where = inside[0]
    return (f"{where} is another repository inside your worktree (it holds a .git of its "
            f"own, or is a git dir); a relayed command acts only in {worktree}'s own tree, "
            "as your node: run fractal from outside that directory")


def verb_env(launch: Mapping[str, str], node_dir: str,
             extra: Mapping[str, str]) -> dict[str, str]:
    """The environment of a relayed verb: ``launch`` (the run's launch environment) with
    ``extra`` added, ``IDENTITY_ENV`` set to ``node_dir`` (the relay's node, whatever
    the agent claimed), and without ``RELAY_ENV`` and ``TOKEN_ENV`` (the token stays in
    the relay: nothing the verb starts may hold it)."""
    # deferred: the relay client imports this module on every sandboxed command (4 ms)
    from fractal.domain.sandbox import RELAY_ENV, TOKEN_ENV

    env = {name: value for name, value in {**launch, **extra}.items()
           if name not in (RELAY_ENV, TOKEN_ENV)}
    env[IDENTITY_ENV] = node_dir
    return env


def path_values(argv: Sequence[str]) -> list[PathValue]:
    """Every value of a file option or ``--path`` in ``argv``, in order. Each token equal
    to such an option (or starting with ``option=``) counts, wherever it stands: a token
    that click would read as another option's value is counted too (the safe side)."""
    found: list[PathValue] = []
    names = (*FILE_OPTIONS, PATH_OPTION)
    for index, token in enumerate(argv):
        for option in names:
            if token == option and index + 1 < len(argv):
                found.append(PathValue(index + 1, option, argv[index + 1], False))
            elif token.startswith(option + "="):
                found.append(PathValue(index, option, token[len(option) + 1:], True))
    return found


def _positionals(rest: Sequence[str]) -> list[str]:
    """The tokens of ``rest`` that are neither an option nor ``--path``'s value."""
    words: list[str] = []
    skip = False
    for token in rest:
        if skip:
            skip = False
        elif token == PATH_OPTION:
            skip = True
        elif not token.startswith("-"):
            words.append(token)
    return words
