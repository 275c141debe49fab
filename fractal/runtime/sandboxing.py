"""The supervisor's sandbox: armed once at boot in the pane's supervisor, then every
program the loop starts for the agent's side (an agent attempt, ``setup.sh``, a check
command) goes through ``confine``.

``arm`` reads the tree's ``sandbox`` setting (never the node's config: the node cannot
switch it off for itself) and probes bubblewrap once (``procs.sandbox.missing``). A
sandboxed node also gets its relay (``runtime.relay``): the socket through which the
``fractal`` commands its agent runs reach the ledger. One node per supervisor process,
so the armed state is one module value; an in-process loop (a test) never arms it and
``confine`` returns its argv unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from fractal.domain.sandbox import TOKEN_ENV, Mode, Verdict, decide, mode_of, private_objects
from fractal.errors import SpawnError
from fractal.procs import sandbox
from fractal.procs.confine import confined_argv, relay_socket
from fractal.runtime.relay import Relay
from fractal.tree import NodePaths
from fractal.workspace.gitfiles import git_dirs, holds_any
from fractal.workspace.refguard import Guard, checked_out, repair

__all__ = ["OBJECTS_EVENT", "REF_EVENT", "adopt_objects", "after_launch", "arm", "confine",
           "disarm", "refusal"]

REF_EVENT = "ref_restored"  # a branch ref a sandboxed launch bent, set right after it
OBJECTS_EVENT = "objects_refused"  # private objects adoption refused (forged, corrupt)

log = logging.getLogger(__name__)


class _Armed:
    """What ``arm`` decided: the node, its launch environment, the verdict and the relay
    (None: unsandboxed)."""

    def __init__(self, paths: NodePaths, env: Mapping[str, str], verdict: Verdict,
                 relay: Relay | None, warn: Callable[[str], None]) -> None:
        self.paths, self.env, self.verdict, self.relay = paths, env, verdict, relay
        self.warn = warn
        self.guard: Guard | None = None  # the branch refs as the running launch found them
        self.token: str | None = None  # the relay token of the launch ``confine`` wrapped


_armed: _Armed | None = None


def arm(paths: NodePaths, env: Mapping[str, str], warn: Callable[[str], None]) -> Verdict:
    """Decide this supervisor's sandbox from the tree's config and the machine, and start
    the node's relay when its launches are sandboxed; ``warn`` says so in the pane when
    the tree's ``sandbox: off`` runs every launch unsandboxed. Returns the verdict."""
    global _armed
    setting = mode_of(paths.tree.root_config())
    if isinstance(setting, Mode):
        verdict = decide(setting, "" if setting is Mode.OFF else sandbox.missing())
    else:
        verdict = Verdict(False, setting)
    relay = None
    if verdict.sandboxed:
        relay = Relay(paths, relay_socket(paths.tree, paths.branch), dict(env),
                      before=adopt_objects)
        relay.start()
    _armed = _Armed(paths, env, verdict, relay, warn)
    _adopt_after(_armed, None)  # what a supervisor that died mid-launch left
    if not verdict.sandboxed and not verdict.refusal:
        warn("unsandboxed: the tree's config says \"sandbox\": \"off\"; the agent can "
             "write wherever this user can (docs/security.md)")
    return verdict


def disarm() -> None:
    """Stop the relay (the supervisor's exit)."""
    global _armed
    if _armed is not None and _armed.relay is not None:
        _armed.relay.stop()
    _armed = None


def refusal() -> str:
    """Why no agent may start ("" when one may): the ``auto``/``on`` refusal."""
    return "" if _armed is None else _armed.verdict.refusal


def confine(argv: Sequence[str], cwd: Path) -> list[str]:
    """``argv`` as the armed sandbox runs it from ``cwd``: wrapped in bubblewrap when the
    node is sandboxed (with a fresh relay token: the one before it stops being accepted;
    the branch refs noted for ``after_launch``, which the caller runs once the launch has
    ended), unchanged when it runs unsandboxed or nothing is armed. Raises SpawnError
    with the refusal when the tree wants a sandbox this machine cannot make."""
    armed = _armed
    if armed is None or (not armed.verdict.sandboxed and not armed.verdict.refusal):
        return list(argv)
    if armed.verdict.refusal:
        raise SpawnError(armed.verdict.refusal)
    _guard_refs(armed)
    relay = armed.relay
    armed.token = None if relay is None else relay.rotate()
    return confined_argv(armed.paths, armed.env, argv, cwd,
                         relay=None if relay is None else relay.path)


def launch_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for the launch ``confine`` just wrapped, with its relay token
    (``TOKEN_ENV``) when it has one. The token travels in bubblewrap's own environment,
    which it hands to the sandboxed program: a process's environment is readable only by
    its user, never through ``ps`` as a command line is."""
    armed, out = _armed, dict(env)
    if armed is not None and armed.token is not None:
        out[TOKEN_ENV] = armed.token
    return out


def _guard_refs(armed: _Armed) -> None:
    """Before a sandboxed launch: pin the packed-only branch refs and note the node's own
    sha and the ref locks (``workspace.refguard.Guard``); a failure is logged, and the
    launch goes on with what the read-only binds cover."""
    armed.guard = None
    dirs = git_dirs(armed.paths.worktree)
    if dirs is None:
        return
    try:
        armed.guard = Guard(dirs[1], armed.paths.branch, armed.paths.tree.root)
    except OSError as exc:
        log.warning("cannot pin the branch refs before the launch: %s", exc)


def adopt_objects() -> None:
    """While a launch lives (the relay, before a command it runs for the agent): adopt a
    snapshot of the node's private objects into the shared store, leaving the private
    dir as it is (``workspace.adoption``); a failure is logged, never raised."""
    armed = _armed
    dirs = None if armed is None else git_dirs(armed.paths.worktree)
    if armed is None or dirs is None:
        return
    private = Path(private_objects(str(dirs[1]), str(dirs[0]), str(armed.paths.node_dir)))
    if not holds_any(private):
        return
    # deferred: only a launch that wrote objects adopts (the supervisor's start stays light)
    from fractal.workspace.adoption import adopt

    try:
        adopt(private, dirs[1], drain=False)
    except OSError as exc:
        log.warning("cannot adopt the node's objects: %s", exc)


def _adopt_after(armed: _Armed, guard: Guard | None) -> None:
    """Once no process of a launch is left: adopt the node's private objects and empty
    the private dir; each refused file is an ``OBJECTS_EVENT`` and a pane warning, and a
    branch that no longer reads whole is set back to its tip before the launch
    (``adoption.set_back``). Never raises."""
    dirs = git_dirs(armed.paths.worktree)
    if dirs is None:
        return
    git_dir, common = dirs
    private = Path(private_objects(str(common), str(git_dir), str(armed.paths.node_dir)))
    if not holds_any(private):
        return
    # deferred: only a launch that wrote objects adopts (the supervisor's start stays light)
    from fractal.workspace.adoption import adopt, set_back

    try:
        adoption = adopt(private, common, drain=True)
    except OSError as exc:
        log.warning("cannot adopt the node's objects: %s", exc)
        return
    if not adoption.refused:
        return
    texts = list(adoption.refused[:20])
    if len(adoption.refused) > 20:
        texts.append(f"and {len(adoption.refused) - 20} more")
    try:
        fixed = set_back(armed.paths.worktree, common, armed.paths.branch,
                         None if guard is None else guard.own_before)
    except Exception as exc:  # a refused reset is named, never a crash of the loop
        fixed = f"refs/heads/{armed.paths.branch} could not be set back: {exc}"
    what = ("refused objects the agent wrote (never adopted into the shared store): "
            + "; ".join(texts) + (f". {fixed}" if fixed else ""))
    armed.warn(what)
    # deferred: only a refusal records (the supervisor's start stays light)
    from fractal.store.ledger import Ledger

    try:
        Ledger(armed.paths.tree.db_path).add_event(
            armed.paths.branch, OBJECTS_EVENT, actor="loop", status="failed",
            metadata=what[:2000])
    except Exception as exc:  # recording must never stop the loop
        log.warning("could not record %s: %s", OBJECTS_EVENT, exc)



def after_launch() -> list[str]:
    """After a sandboxed launch has ended (every process of it gone): adopt the node's
    private objects (``_adopt_after``), then undo what it did to the branch refs
    (``domain.refguard``), each repair a ``REF_EVENT`` of the node naming the ref and a
    pane warning. Returns the repairs; none when nothing is armed."""
    armed = _armed
    if armed is None:
        return []
    guard, armed.guard = armed.guard, None
    if armed.verdict.sandboxed:
        _adopt_after(armed, guard)
    if guard is None:
        return []
    # deferred: only a launch's end reads the ledger (the supervisor's start stays light)
    from fractal.store.ledger import Ledger

    ledger = Ledger(armed.paths.tree.db_path)
    owners: set[str] | None = None

    def known(branch: str) -> bool:
        nonlocal owners
        if owners is None:
            try:
                owners = {row.node for row in ledger.nodes()}
            except Exception as exc:  # an unread ledger deletes nothing
                log.warning("cannot read the nodes to check a new branch: %s", exc)
                return True
            owners |= checked_out(guard.common, besides=git_dir)
        return branch in owners

    git_dir = (git_dirs(armed.paths.worktree) or (guard.common, guard.common))[0]
    try:
        repairs = repair(guard, armed.paths.tree.repo, known, besides=git_dir)
    except OSError as exc:
        log.warning("cannot check the branch refs after the launch: %s", exc)
        return []
    if repairs:
        for text in repairs:
            armed.warn(f"the agent bent a branch ref: {text}")
            try:
                ledger.add_event(armed.paths.branch, REF_EVENT, actor="loop",
                                 status="completed", metadata=text)
            except Exception as exc:  # recording must never stop the loop
                log.warning("could not record %s: %s", REF_EVENT, exc)
    return repairs
