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

from fractal.domain.sandbox import Mode, Verdict, decide, mode_of
from fractal.errors import SpawnError
from fractal.procs import sandbox
from fractal.procs.confine import confined_argv, relay_socket
from fractal.runtime.relay import Relay
from fractal.tree import NodePaths

__all__ = ["arm", "confine", "disarm", "refusal"]

log = logging.getLogger(__name__)


class _Armed:
    """What ``arm`` decided: the node, its launch environment, the verdict and the relay
    (None: unsandboxed)."""

    def __init__(self, paths: NodePaths, env: Mapping[str, str], verdict: Verdict,
                 relay: Relay | None) -> None:
        self.paths, self.env, self.verdict, self.relay = paths, env, verdict, relay


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
        relay = Relay(paths, relay_socket(paths.tree, paths.branch), dict(env))
        relay.start()
    _armed = _Armed(paths, env, verdict, relay)
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
    node is sandboxed (with a fresh relay token: the one before it stops being accepted), unchanged when it runs unsandboxed or nothing is armed. Raises
    SpawnError with the refusal when the tree wants a sandbox this machine cannot make."""
    armed = _armed
    if armed is None or (not armed.verdict.sandboxed and not armed.verdict.refusal):
        return list(argv)
    if armed.verdict.refusal:
        raise SpawnError(armed.verdict.refusal)
    relay = armed.relay
    if relay is None:
        return confined_argv(armed.paths, armed.env, argv, cwd, relay=None)
    return confined_argv(armed.paths, armed.env, argv, cwd, relay=relay.path,
                         token=relay.rotate())
