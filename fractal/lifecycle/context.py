"""The context a verb acts in: the tree, who is calling, who is acting, the ledger.

The CLI builds one ``Context`` per command (``open_context``) and hands it to the verb; a
test builds one the same way on a tree in a temporary directory and calls the verb
in-process. Two branches describe the caller:

* ``caller``: the node whose worktree holds ``cwd`` (``--path``; the root outside any node
  worktree). A verb given no node name acts on it.
* ``acting``: on whose behalf the verb runs, which is what authority is measured from.
  A process that descends from a node's live supervisor (``process_branch``: its pid
  and create time are recorded on the node's row, and a supervisor is a child
  subreaper) acts as that node, and its claim must agree: ``_NODE`` (which the loop
  exports, the node's directory) when set, else the caller. A claim naming another node
  (a rewritten ``_NODE``, or ``_NODE`` dropped and ``--path`` at the main checkout) is
  refused, never corrected (``fractal.domain.authority.posing``). A process below no
  supervisor acts as ``_NODE``'s node when it is set, else as the caller. ``actor``
  (recorded on event rows) is ``operator`` at the root.

Neither falls back: a ``_NODE`` that is empty or names no registered node of this tree
by its directory, or a ``cwd`` inside the worktree of a branch that is no registered node, is
refused (``Refused``) rather than read as the root or the directory's node.

``authorize(verb, target)`` is the one place a verb's authority is checked, by the rule
table of ``fractal.domain.authority``; a refusal (a posing claim's too) is recorded as a
``failed`` event on the target and raised. A posing claim met elsewhere (a verb that
acts on its own node: radio, plans, pool result) is recorded as a ``failed`` ``act``
event on the node the process really runs under.

Construction is cheap: the tree is found with git, and ``caller``, ``acting`` and the
ledger are worked out on first use and then fixed for the context's life (the registry is
read with the stdlib reader, the ancestry from ``/proc``; the ledger, which checks the
schema stamp, opens only when a verb writes).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from fractal.domain import authority
from fractal.domain.run.reasons import clip_reason
from fractal.errors import FractalError
from fractal.store.backend import ledger_exists
from fractal.tree import Tree, caller_branch, locate, resolve_node, trees_in

if TYPE_CHECKING:
    from fractal.store.ledger import Ledger

__all__ = ["LOOP_NODE_ENV", "Context", "Posing", "Refused", "open_context"]

LOOP_NODE_ENV = "_NODE"
"""The variable a node's loop exports to everything it runs: the node's directory."""

_REASON_MAX = 1000  # characters of a refusal kept in the event row


class Refused(FractalError):
    """A verb was refused for the node it named; the reason is recorded as a failed event."""


class Posing(Refused):
    """A process below one node's supervisor claimed to act as another node (or as the
    operator); ``process`` is the node it runs under."""

    def __init__(self, why: str, process: str) -> None:
        super().__init__(why)
        self.process = process


@dataclass(frozen=True)
class Context:
    """One command's view of its tree. ``cwd`` is the caller's position (``--path``);
    ``loop_node`` the ``_NODE`` value inherited from a loop (None outside any); ``pid`` the
    process whose ancestry decides which supervisor it runs under (None: read as below
    none, for a context built on behalf of another process)."""

    tree: Tree
    cwd: Path
    loop_node: str | None = None
    pid: int | None = field(default_factory=os.getpid)
    top: Path | None = field(default=None, compare=False)
    """The top of the worktree holding ``cwd`` when already known (None: asked on use)."""
    environ: Mapping[str, str] | None = field(default=None, compare=False, repr=False)
    """The caller's environment (None: this process's). A verb that launches a supervisor
    keeps it as the run's environment on a fresh start (``lifecycle/start/hosting.keep_env``)."""

    @property
    def environment(self) -> Mapping[str, str]:
        """The caller's environment: ``environ``, else this process's."""
        return os.environ if self.environ is None else self.environ

    def known(self) -> list[str]:
        """Every registered node, read now with the light reader (no SQLAlchemy)."""
        from fractal.store import reader  # deferred: start-up cost (13 modules)

        return [row.node for row in reader.node_rows(self.tree.db_path)]

    @cached_property
    def process_branch(self) -> str | None:
        """The node whose live supervisor ``pid`` descends from (the nearest ancestor; the
        supervisor process itself is not below itself), or None below none. Read from
        ``/proc`` against the recorded supervisor pids and create times, so a recycled pid
        is never taken for a supervisor. Every tree of the repository counts: a process
        below another tree's node acts as that node (a branch this tree does not own), so
        its claim on this tree (its ``--path``) is refused as posing, never read as this
        tree's operator or one of its nodes."""
        if self.pid is None:
            return None
        from fractal.procs.ancestry import lineage  # deferred: start-up cost (2 modules)
        from fractal.store import reader  # deferred: start-up cost (13 modules)

        others = [t.db_path for t in trees_in(self.tree.repo)
                  if t.root != self.tree.root and ledger_exists(t.db_path)]
        supervisors = {row.supervisor_pid: (row.node, row.supervisor_started)
                       for db_path in (self.tree.db_path, *others)
                       for row in reader.node_rows(db_path)
                       if row.supervisor_pid and row.supervisor_started is not None}
        if not supervisors:
            return None
        ancestors = lineage(self.pid, supervisors)[1:]  # a supervisor is not its own agent
        return authority.loop_by_ancestry(ancestors, supervisors)

    @cached_property
    def caller(self) -> str:
        """The branch whose worktree holds ``cwd``; the tree's root when none does. Raises
        Refused when that worktree's branch belongs to the tree but is no registered node
        (a deleted node's leftovers, a hand-made checkout)."""
        branch = caller_branch(self.cwd, self.tree, self.top)
        if branch != self.tree.root and branch not in self.known():
            raise Refused(f"{self.cwd} is in the worktree of {branch}, which is no registered "
                          "node of this tree; run the command from a node's worktree or the "
                          "main checkout (`fractal node list` shows the nodes)")
        return branch

    @cached_property
    def loop_branch(self) -> str | None:
        """The node whose loop runs this process (from ``loop_node``), None outside any
        loop. Raises Refused when ``loop_node`` names no registered node of this tree by
        its directory: an unknown ``_NODE`` is never read as the working directory."""
        if self.loop_node is None:
            return None
        if not self.loop_node.strip():
            raise Refused(f"{LOOP_NODE_ENV} is set but empty: inside a node's loop it names "
                          "that node's directory; outside any loop, unset it")
        branch = Path(self.loop_node).name
        if (self.tree.owns(branch) and branch != self.tree.root and branch in self.known()
                and Path(self.loop_node) == self.tree.node(branch).node_dir):
            return branch
        raise Refused(f"{LOOP_NODE_ENV}={self.loop_node} names no node of the tree rooted "
                      f"at {self.tree.root} (it must be a registered node's directory, as "
                      "the node's loop exports it); a node's agent acts only as its own "
                      "node, and the operator runs fractal outside any node's loop")

    def posing(self) -> str | None:
        """Why this process's claim (``_NODE``, else ``--path``) disagrees with the
        supervisor it runs under, or None when it agrees or it runs under none."""
        process = self.process_branch
        if process is None:
            return None
        caller = self.caller if self.loop_node is None else self.tree.root
        return authority.posing(process, self.loop_branch, caller, root=self.tree.root,
                                variable=LOOP_NODE_ENV)

    @cached_property
    def acting(self) -> str:
        """The branch the verb acts for: the node whose supervisor this process runs
        under, else the loop's node (``_NODE``), else ``caller``. Raises Posing, recorded
        as a failed ``act`` event on the node it runs under, when the claim disagrees."""
        why = self.posing()
        if why is not None:
            process = self.process_branch or self.tree.root
            self.ledger.add_event(process, "act", actor=process, status="failed",
                                  metadata=clip_reason(f"refused: {why}", _REASON_MAX))
            raise Posing(why, process)
        return authority.acting_node(self.process_branch, self.loop_branch, self.caller)

    @property
    def actor(self) -> str:
        """Who is acting, as event rows record it: ``acting``; at the root ``operator``,
        or ``tmux`` for a process below no supervisor that runs in a window of a node's
        session on a tmux server (``fx-...``, made with ``tmux new-window`` there): it is
        no operator's shell, whoever opened it."""
        if self.acting != self.tree.root:
            return self.acting
        return "tmux" if self.in_node_session else "operator"

    @cached_property
    def in_node_session(self) -> bool:
        """True when this process runs below no supervisor, in a pane of a node's tmux
        session (``fx-`` sessions: ``tmux.session_name``). Read from ``/proc`` and, only
        for a process below a tmux server, one ``tmux list-panes``."""
        if self.pid is None or self.process_branch is not None:
            return False
        from fractal.procs.ancestry import tmux_pane  # deferred: start-up cost (2 modules)

        pane = tmux_pane(self.pid)
        if pane is None:
            return False
        from fractal import tmux  # deferred: start-up cost (11 modules)

        session = tmux.session_of_pane(pane[1], pane[0])
        return session is not None and session.startswith("fx-")

    @property
    def is_operator(self) -> bool:
        """True when the operator at the root acts (no loop, no node worktree)."""
        return self.acting == self.tree.root

    @cached_property
    def ledger(self) -> Ledger:
        """The tree's ledger (its database is created and migrated on first use)."""
        from fractal.store.ledger import Ledger  # deferred: start-up cost (24 modules)

        return Ledger(self.tree.db_path)

    def subtree(self, name: str | None) -> str:
        """The branch ``name`` resolves to (the full branch, the branch below the root, or a
        unique last segment; inside a node's loop the loop's own children and then its
        descendants come first), or ``caller`` when ``name`` is None; the root is allowed
        (a verb over the whole tree). Raises NodeNotFound for an unknown or ambiguous name."""
        if not name:
            return self.caller
        return resolve_node(name, [*self.known(), self.tree.root], self.tree,
                            near=lambda: self.loop_near)

    @property
    def loop_near(self) -> str | None:
        """The node whose loop runs this process (its supervisor's node, else a valid
        ``_NODE``), None outside any loop: the node a short name is resolved near first."""
        if self.process_branch is not None:
            return self.process_branch
        if self.loop_node is None:
            return None
        try:
            return self.loop_branch
        except Refused:
            return None

    def target(self, name: str | None) -> str:
        """Like ``subtree``, but the root is refused (it has no loop): raises FractalError
        naming the way to list the nodes, NodeNotFound for a name that does not resolve."""
        branch = self.subtree(name)
        if branch == self.tree.root:
            raise FractalError(f"{branch} is the tree's root: it has no loop; name a node "
                               "(`fractal node list` shows them)")
        return branch

    def check_claim(self, verb: str, target: str) -> None:
        """Raise Posing, recorded as a failed ``verb`` event on ``target`` by the node this
        process really runs under, when its claim disagrees with that node (``posing``).
        A verb that reads ``acting`` before its authority check calls this first."""
        why = self.posing()
        if why is not None:
            process = self.process_branch or self.tree.root
            self.ledger.add_event(target, verb, actor=process, status="failed",
                                  metadata=clip_reason(f"refused: {why}", _REASON_MAX))
            raise Posing(why, process)

    def refusal(self, verb: str, target: str) -> str | None:
        """The authority rule's refusal of ``verb`` on ``target`` by the acting node, or
        None when it may (``fractal.domain.authority.refusal``). A posing claim is not
        returned but raised (``check_claim``)."""
        self.check_claim(verb, target)
        return authority.refusal(verb, acting=self.acting, target=target, root=self.tree.root)

    def refuse(self, verb: str, target: str, why: str, *, limit: int = _REASON_MAX) -> Refused:
        """Record a ``failed`` ``verb`` event on ``target`` (metadata ``refused: <why>`` on
        one line, at most ``limit`` characters) and return the Refused error to raise."""
        self.ledger.add_event(target, verb, actor=self.actor, status="failed",
                              metadata=clip_reason(f"refused: {why}", limit))
        return Refused(why)

    def authorize(self, verb: str, target: str) -> None:
        """Raise Refused, recorded as a ``failed`` ``verb`` event on ``target``, unless the
        acting node may ``verb`` ``target`` (the operator may act on any node)."""
        why = self.refusal(verb, target)
        if why is not None:
            raise self.refuse(verb, target, why)

    def for_tree(self, tree: Tree) -> Context:
        """The same caller's context over another tree of the repository, positioned at
        that tree's repository; the loop it may run in carries over."""
        return Context(tree=tree, cwd=tree.repo, loop_node=self.loop_node, pid=self.pid)


def open_context(cwd: Path, environ: Mapping[str, str] | None = None, *,
                 pid: int | None = None) -> Context:
    """The context of a command run at ``cwd`` with ``environ`` (default: this process's
    environment) by process ``pid`` (default: this process). Raises NotATree when no tree
    exists there, GitError outside a git repository."""
    env = os.environ if environ is None else environ
    tree, top = locate(cwd)
    return Context(tree=tree, cwd=cwd, top=top, loop_node=env.get(LOOP_NODE_ENV),
                   pid=os.getpid() if pid is None else pid, environ=environ)
