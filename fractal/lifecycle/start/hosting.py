"""Host a supervisor in a detached tmux session (used by start, continue and resume).

A run keeps the environment it started with. A fresh ``node start`` writes the calling
command's environment to the node's kept-environment file (``NodePaths.run_env_path``,
0600, outside the worktree: ``fractal.workspace.runenv``); every relaunch of that node
(``--continue``, ``node resume``, ``fractal resume``, the dashboard's keys) leaves the
file as it is, so the supervisor boots with the start shell's environment whoever
relaunches it, unless ``refresh`` (``--refresh-env``) replaces it with the caller's on
purpose. Its tmux server follows it: a relaunch is hosted on the socket of the kept
environment's ``TMUX_TMPDIR``, not the relaunching shell's. The supervisor reads the file
at boot: API keys never sit in the argv of a long-lived process nor in the tmux server's
environment, and never in the database.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from fractal import tmux
from fractal.domain.states import Move, Status
from fractal.errors import FractalError, TmuxError
from fractal.lifecycle.notify import ensure_watcher
from fractal.store.ledger import Ledger
from fractal.tree import NodePaths
from fractal.workspace import runenv

BOOT_WAIT = 20.0  # seconds a verb waits for the supervisor to take the node
SETTLING_WAIT = 10.0
"""Seconds a start waits for the session of a node that has just settled (its supervisor
closed the run and is on its way out) to close, before refusing."""


@dataclass(frozen=True)
class Hosted:
    """Where a supervisor now runs; ``pid`` is its pane process (None when unknown);
    ``env`` what the launch did to the node's kept environment."""

    session: str
    socket: Path
    pid: int | None = None
    env: KeptEnv | None = None


@dataclass(frozen=True)
class KeptEnv:
    """What one launch did to the node's kept environment: ``note`` for the caller (names
    only, empty when the kept one was simply restored) and ``before``, the file's content
    before the launch wrote it (None: there was none; ``wrote`` False: left as it was), so
    a launch that fails can put it back."""

    note: str = ""
    wrote: bool = False
    before: dict[str, str] | None = None


def keep_env(paths: NodePaths, environ: Mapping[str, str], *, fresh: bool,
             refresh: bool) -> KeptEnv:
    """Settle the environment the supervisor about to be hosted boots with.

    A ``fresh`` start keeps ``environ`` (the calling command's). A relaunch keeps what
    the run started with, unless ``refresh`` replaces it with ``environ`` (the note names
    the variables that changed) or there is none to keep (a run started by an older
    fractal: ``environ`` is kept from now on, and the note says so). Raises FractalError
    when the file cannot be written.
    """
    before = runenv.load(paths.run_env_path)
    if not fresh and before is not None and not refresh:
        return KeptEnv()
    note = ""
    if not fresh:  # only a note needs the wording: a plain start or resume never loads it
        # deferred: start-up cost (1 module)
        from fractal.domain.run.env import changed, missing_note, refresh_note

        note = (missing_note(paths.branch) if before is None
                else refresh_note(paths.branch, changed(before, environ)))
    try:
        runenv.keep(paths.run_env_path, environ)
    except OSError as exc:
        raise FractalError(f"cannot write {paths.run_env_path}: {exc.strerror or exc}; "
                           f"check that {paths.tree.data_dir} is writable") from None
    return KeptEnv(note=note, wrote=True, before=before)


def undo_env(paths: NodePaths, kept: KeptEnv | None) -> None:
    """Put the node's kept environment back as it was before a launch that failed: the
    previous content, or no file when there was none. Never raises."""
    if kept is None or not kept.wrote:
        return
    try:
        if kept.before is None:
            runenv.forget(paths.run_env_path)
        else:
            runenv.keep(paths.run_env_path, kept.before)
    except OSError:
        pass  # the next launch writes or restores it again


def supervisor_argv(paths: NodePaths, *, continue_mode: bool = False,
                    resume_mode: bool = False) -> list[str]:
    """The pane command: this interpreter running the hidden ``node _run`` verb, with ``-P``
    so the worktree (the pane's working directory) is not put on sys.path: a ``fractal/``
    package an agent plants there must not be imported in place of this one."""
    argv = [sys.executable, "-P", "-m", "fractal", "node", "_run", "--path", str(paths.worktree)]
    if continue_mode:
        argv.append("--continue")
    if resume_mode:
        argv.append("--resume")
    return argv


def launch_socket(paths: NodePaths, environ: Mapping[str, str], *, fresh: bool,
                  refresh: bool) -> Path:
    """The tmux socket a supervisor is hosted on: the one of the environment it boots with
    (``keep_env``). A fresh start or ``refresh`` uses ``environ``'s; a relaunch uses the
    kept environment's, so a resume from a shell with another ``TMUX_TMPDIR``, or none (a
    bare ``env -i`` shell after a reboot), lands on the server the run started on, never
    on that shell's default one; ``environ``'s when none is kept."""
    if not fresh and not refresh:
        kept = runenv.load(paths.run_env_path)
        if kept is not None:
            return tmux.socket_path(kept)
    return tmux.socket_path(environ)


def session_free(paths: NodePaths, *, settling_wait: float = SETTLING_WAIT,
                 socket: Path | None = None) -> Hosted:
    """The session name and ``socket`` (default: this process's, ``tmux.socket_path``) for
    ``paths``, refusing when the session is (or may be) live.

    Called once the node is known settled or parked: a session still alive then belongs to
    a supervisor that has closed its run and is exiting, so it is given ``settling_wait``
    seconds to close (polled every 0.1 s) before the refusal; a probe that cannot tell
    (its server exiting, or wedged) is given the same wait."""
    socket = socket if socket is not None else tmux.socket_path()
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
         resume_mode: bool = False, environ: Mapping[str, str] | None = None,
         refresh: bool = False) -> Hosted:
    """Launch the supervisor for ``paths`` in a new detached session on the tmux server of
    the environment it boots with (``launch_socket``), with the node's kept environment
    settled first (``keep_env``: a fresh start keeps ``environ``, default this process's;
    a continue or resume restores the kept one unless ``refresh``). Call under
    the tree lock after the status checks. A launch that fails puts the kept environment
    back (``undo_env``); the caller does the same when it gives up on the hosted
    supervisor later. Raises FractalError, TmuxError."""
    environ = os.environ if environ is None else environ
    fresh = not (continue_mode or resume_mode)
    hosted = session_free(paths, socket=launch_socket(paths, environ, fresh=fresh,
                                                      refresh=refresh))
    kept = keep_env(paths, environ, fresh=fresh, refresh=refresh)
    try:
        pid = tmux.launch(hosted.session, supervisor_argv(paths, continue_mode=continue_mode,
                                                          resume_mode=resume_mode),
                          cwd=paths.worktree, socket=hosted.socket)
    except BaseException:
        undo_env(paths, kept)
        raise
    ledger.set_tmux(paths.branch, hosted.session, str(hosted.socket))
    ensure_watcher(paths.tree)  # the root config's `notify` command (docs/dashboard.md)
    return Hosted(hosted.session, hosted.socket, pid, kept)


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
    # deferred: start-up cost (2 modules)
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

