"""Host a supervisor in a detached tmux session (used by start, continue and resume).

The environment of the calling command reaches the supervisor through a 0600 file in
the node dir that the supervisor reads and deletes at boot: API keys never sit in the
argv of a long-lived process nor in the tmux server's environment.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from fractal import tmux
from fractal.domain.states import Move, Status
from fractal.errors import FractalError, TmuxError
from fractal.lifecycle.notify import ensure_watcher
from fractal.store.ledger import Ledger
from fractal.tree import NodePaths
from fractal.workspace.nodedir import write_atomic

BOOT_WAIT = 20.0  # seconds a verb waits for the supervisor to take the node
SETTLING_WAIT = 10.0
"""Seconds a start waits for the session of a node that has just settled (its supervisor
closed the run and is on its way out) to close, before refusing."""


@dataclass(frozen=True)
class Hosted:
    """Where a supervisor now runs; ``pid`` is its pane process (None when unknown)."""

    session: str
    socket: Path
    pid: int | None = None


def supervisor_argv(paths: NodePaths, *, continue_mode: bool = False,
                    resume_mode: bool = False) -> list[str]:
    """The pane command: this interpreter running the hidden ``node _run`` verb."""
    argv = [sys.executable, "-m", "fractal", "node", "_run", "--path", str(paths.worktree)]
    if continue_mode:
        argv.append("--continue")
    if resume_mode:
        argv.append("--resume")
    return argv


def session_free(paths: NodePaths, *, settling_wait: float = SETTLING_WAIT) -> Hosted:
    """The session name and socket for ``paths``, refusing when it is (or may be) live.

    Called once the node is known settled or parked: a session still alive then belongs to
    a supervisor that has closed its run and is exiting, so it is given ``settling_wait``
    seconds to close (polled every 0.1 s) before the refusal; a probe that cannot tell
    (its server exiting, or wedged) is given the same wait."""
    socket = tmux.socket_path()
    session = tmux.session_name(paths.tree.repo, paths.branch)
    liveness = tmux.probe(session, socket)
    deadline = time.monotonic() + settling_wait
    # While the last session closes, its server exits too: a probe then may not tell, even
    # the first one, so an answer other than GONE is waited on alike.
    while liveness is not tmux.Liveness.GONE and time.monotonic() < deadline:
        time.sleep(0.1)
        liveness = tmux.probe(session, socket)
    if liveness is tmux.Liveness.ALIVE:
        raise FractalError(f"tmux session {session} already exists; node {paths.branch} "
                           "is still running (or parking: retry in a moment)")
    if liveness is tmux.Liveness.UNKNOWN:
        raise TmuxError(f"cannot tell whether tmux session {session} is running; not starting")
    return Hosted(session, socket)


def host(paths: NodePaths, ledger: Ledger, *, continue_mode: bool = False,
         resume_mode: bool = False) -> Hosted:
    """Launch the supervisor for ``paths`` in a new detached session. Call under the tree
    lock after the status checks. Raises FractalError, TmuxError."""
    hosted = session_free(paths)
    try:
        write_atomic(paths.launch_env_path, json.dumps(dict(os.environ)), mode=0o600)
    except OSError as exc:
        raise FractalError(f"cannot write {paths.launch_env_path}: {exc.strerror or exc}; "
                           f"check that {paths.node_dir} is writable") from None
    try:
        pid = tmux.launch(hosted.session, supervisor_argv(paths, continue_mode=continue_mode,
                                                          resume_mode=resume_mode),
                          cwd=paths.worktree, socket=hosted.socket)
    except BaseException:
        paths.launch_env_path.unlink(missing_ok=True)
        raise
    ledger.set_tmux(paths.branch, hosted.session, str(hosted.socket))
    ensure_watcher(paths.tree)  # the root config's `notify` command (docs/dashboard.md)
    return Hosted(hosted.session, hosted.socket, pid)


def take(paths: NodePaths, ledger: Ledger, hosted: Hosted, move: Move) -> bool:
    """Take the node for the supervisor just hosted: perform ``move`` (START or RESUME)
    with the pane process's pid and create time, so the node reads ``active`` the moment
    the verb returns and a supervisor that dies while it boots is found by the crash heal
    like any other (its pane gone, its pid dead). The supervisor, finding the node taken
    under its own pid (or its parent shell's), goes on with its run.

    True when the node is now held by that process (this move, or the supervisor's own
    that came first); False when the pane process is already gone or the move was refused
    for another reason: the caller then waits for the boot as before.
    """
    from fractal.procs.procinfo import create_time as process_create_time

    if hosted.pid is None:
        return False
    created = process_create_time(hosted.pid)
    if created is None:
        return False
    if ledger.move(paths.branch, move, supervisor=(hosted.pid, created)).ok:
        return True
    row = ledger.node(paths.branch)
    return row is not None and row.status is Status.ACTIVE and row.supervisor_pid == hosted.pid


def await_boot(paths: NodePaths, ledger: Ledger, hosted: Hosted, *,
               from_status: Status) -> None:
    """Wait until the supervisor has moved the node off ``from_status``.

    Raises FractalError when the session vanished first (the supervisor failed to boot).
    Returns quietly after BOOT_WAIT seconds: a slow boot is not an error.
    """
    deadline = time.monotonic() + BOOT_WAIT
    while time.monotonic() < deadline:
        row = ledger.node(paths.branch)
        if row is not None and row.status is not from_status:
            return
        if tmux.probe(hosted.session, hosted.socket) is tmux.Liveness.GONE:
            row = ledger.node(paths.branch)
            if row is not None and row.status is not from_status:
                return
            raise FractalError(f"the supervisor of {paths.branch} exited before it started; "
                               f"see {paths.supervisor_log}")
        time.sleep(0.05)

