"""The pane's entry point: set up logging and stdout, then run a Supervisor."""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sys
import threading
from logging.handlers import RotatingFileHandler
from pathlib import Path
from typing import NoReturn

from fractal.runtime.boot import RunOptions
from fractal.runtime.pane import PaneReporter
from fractal.runtime.supervisor import Supervisor
from fractal.store import lockwait
from fractal.tree import find_tree
from fractal.workspace import git

LOG_BYTES = 10 * 1024 * 1024  # supervisor.log rotates into supervisor.log.1 past this size


def run_supervisor(worktree: Path, *, continue_mode: bool, resume_mode: bool) -> int:
    """Run the node checked out at ``worktree``; returns the process exit code.

    Logs go to ``<node_dir>/supervisor.log`` (rotating at LOG_BYTES into ``.1``); the
    pane shows the loop's banners and the agent's output, and ``<node_dir>/pane.log``
    keeps a copy of what it showed.
    """
    tree = find_tree(worktree)
    branch = git.current_branch(worktree)
    if branch is None:
        sys.stderr.write(f"fractal: {worktree} has a detached HEAD; cannot run\n")
        return 1
    paths = tree.node(branch)
    paths.node_dir.mkdir(parents=True, exist_ok=True)
    handler = RotatingFileHandler(paths.supervisor_log, maxBytes=LOG_BYTES, backupCount=1,
                                  encoding="utf-8")
    handler.setFormatter(logging.Formatter(
        "%(asctime)s %(levelname)s %(name)s [pid %(process)d] %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(line_buffering=True, errors="replace")
    pane = PaneReporter(transcript=paths.pane_log)
    lockwait.set_wait_notice(lambda text: _say_waiting(pane, text))
    supervisor = Supervisor(paths, RunOptions(continue_mode=continue_mode,
                                              resume_mode=resume_mode), pane)
    logging.getLogger(__name__).info("supervisor starting for %s", branch)
    return supervisor.run()


def _say_waiting(pane: PaneReporter, text: str) -> None:
    """The pane's line, once per wait, when the database is locked by another process:
    anything held is written first, so the pane shows where the run stands."""
    pane.release()
    pane.warning(f"{text}; the run goes on once it is free")


def exit_now(code: int) -> NoReturn:
    """End the supervisor's process with ``code`` once its run is recorded: wait for any
    non-daemon thread, run the exit handlers (``logging`` flushes ``supervisor.log``),
    flush the pane's streams, then leave without the interpreter's teardown of every
    module and object. That teardown does nothing the records need and took tens of
    milliseconds, which a ``fractal node kill`` waiting for the supervisor to go paid."""
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed or broken pane
            stream.flush()
    os._exit(code)
