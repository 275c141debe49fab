"""Notifications: the root config's ``notify`` command, run for each batch of new
attention events (``fractal.domain.attention.rules``), at most once per event.

Who runs it: one *watcher* process per tree (``fractal _notify``), started detached by
``ensure_watcher`` whenever a verb hosts a supervisor (start, continue, resume) and the
root config names a command. It is never a child of a supervisor (whose exit sweep
would end it) and holds ``<root data dir>/notify.lock`` for its life, so a second one
exits at once. It looks at the database files' (mtime, size) every POLL_S seconds;
after a change it waits SETTLE_S more (a subtree landing at once becomes one batch),
then ``dispatch``es; with no write it still looks every RECHECK_S (a stall is the
absence of writes). It exits IDLE_EXIT_S after the tree last had an active node (and
never in its first BOOT_GRACE_S, while the supervisor that started it boots), and at
once when the tree's database is gone; ``fractal destroy`` ends it (``stop_watcher``,
by its launch marker) before it removes the database.

``dispatch`` claims the new events in the ``notifications`` table before the command
runs (the claim is the dedup: a crash after it loses a notification, never doubles
one), then runs the command in its own process group under NOTIFY_TIMEOUT_S, its
environment stripped of credentials (``domain.notify``); whatever it leaves running in
the background is stopped once it exits. Failures are logged to
``<root data dir>/notify.log`` and recorded on the rows; they are not retried.
"""

from __future__ import annotations

import fcntl
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from fractal.domain.notify import batch_env, batch_payload, notify_env, wanted_kinds
from fractal.errors import FractalError
from fractal.lifecycle.context import Context
from fractal.store.backend import ledger_exists
from fractal.tree import Tree

if TYPE_CHECKING:
    import logging


def _log() -> logging.Logger:
    """This module's logger; ``logging`` is imported on the first message (a start that
    only checks for a watcher never logs)."""
    import logging  # deferred: start-up cost (6 modules)

    return logging.getLogger(__name__)


POLL_S = 1.0
SETTLE_S = 2.0
RECHECK_S = 30.0
IDLE_EXIT_S = 60.0  # FRACTAL_NOTIFY_IDLE_S in the starting shell overrides it
NOTIFY_TIMEOUT_S = 10.0
KILL_GRACE_S = 2.0
BOOT_GRACE_S = 20.0  # a watcher started with a supervisor waits this long for it to boot
# (FRACTAL_NOTIFY_BOOT_GRACE_S in the starting shell overrides it)


@dataclass(frozen=True)
class Delivery:
    """One run of the command: batch id, events carried, how it ended."""

    batch: str
    count: int
    status: str  # completed | failed
    exit_code: int | None
    reason: str


def _lock_path(tree: Tree) -> Path:
    return tree.data_dir / "notify.lock"


def notify_command(tree: Tree) -> str | None:
    """The root config's ``notify`` command, or None when unset or not a string."""
    value = tree.root_config().get("notify")
    return value.strip() if isinstance(value, str) and value.strip() else None


def dispatch(tree: Tree, *, env: dict[str, str] | None = None,
             timeout: float = NOTIFY_TIMEOUT_S) -> Delivery | None:
    """Claim the tree's new attention events and run ``notify`` once for them.

    Returns None when no command is set or nothing new (of a wanted kind) appeared.
    """
    from fractal.domain.attention.rules import Kind  # deferred: start-up cost (16 modules)
    from fractal.lifecycle.inbox import tree_inbox  # deferred: start-up cost (17 modules)
    from fractal.store.inbox import Claim, InboxStore  # deferred: start-up cost (16 modules)

    command = notify_command(tree)
    if command is None:
        return None
    kinds, problems = wanted_kinds(tree.root_config().get("notify_events"),
                                   (k.value for k in Kind))
    for problem in problems:
        _log().warning("%s", problem)
    entries = tree_inbox(tree, include_acked=True)
    batch = uuid.uuid4().hex[:8]
    claims = [Claim(e.item.key, e.item.fingerprint, e.item.kind.value, e.item.node)
              for e in entries]
    every = {k.value for k in Kind}
    claimed = InboxStore(tree.db_path).claim(claims, batch, skipped=every - kinds)
    if not claimed:
        return None
    keys = {c.item_key for c in claimed}
    events = [e.as_row() for e in entries if e.item.key in keys]
    return _run(tree, command, batch, events, env if env is not None else dict(os.environ),
                timeout)


def _run(tree: Tree, command: str, batch: str, events: list[dict[str, object]],
         base: dict[str, str], timeout: float) -> Delivery:
    # deferred: start-up cost (11 modules)
    from fractal.procs.processes import kill_group, spawn_group
    from fractal.store.inbox import InboxStore  # deferred: start-up cost (16 modules)

    child_env = {**notify_env(base), **batch_env(batch, tree.root, events)}
    payload = batch_payload(batch, tree.root, events).encode()
    logfile = tree.data_dir / "notify.log"
    status, code, reason = "failed", None, ""
    try:
        launched = spawn_group(["/bin/sh", "-c", command], cwd=tree.repo, env=child_env,
                               stdin_data=payload, merge_stderr=True)
        kept = _OutputKeeper(launched.popen.stdout)  # a chatty command never fills the pipe
        kept.start()
        try:
            code = launched.popen.wait(timeout=timeout)
            status = "completed" if code == 0 else "failed"
            reason = "" if code == 0 else f"exit {code}"
            kill_group(launched.handle, grace=KILL_GRACE_S)  # what it left in the background
        except Exception:  # subprocess.TimeoutExpired (only processes.py imports it)
            kill_group(launched.handle, grace=KILL_GRACE_S)
            launched.popen.wait(timeout=KILL_GRACE_S + 3)
            reason = f"timed out after {timeout:g}s"
        kept.join(1.0)
        output = kept.head  # a background child may still hold the pipe: never wait for it
    except FractalError as exc:
        reason, output = str(exc), b""
    InboxStore(tree.db_path).settle(batch, status, code, reason)
    _log_line(logfile, f"batch {batch}: {len(events)} event(s), {status}"
              f"{': ' + reason if reason else ''}"
              + (f"; output: {output.decode(errors='replace').strip()[:500]}"
                 if output.strip() and status != "completed" else ""))
    return Delivery(batch, len(events), status, code, reason)


class _OutputKeeper(threading.Thread):
    """Reads a command's output while it runs, keeping the first 4000 bytes and
    discarding the rest, so a command that prints more than a pipe holds is not stuck
    writing (and then killed as timed out)."""

    def __init__(self, pipe: IO[bytes] | None) -> None:
        super().__init__(daemon=True, name="fractal-notify-output")
        self.pipe = pipe
        self.head = b""

    def run(self) -> None:
        if self.pipe is None:
            return
        try:
            while chunk := os.read(self.pipe.fileno(), 65536):
                if len(self.head) < 4000:
                    self.head += chunk[: 4000 - len(self.head)]
        except (OSError, ValueError):
            return




def _log_line(path: Path, text: str) -> None:
    from fractal.store.timefmt import utc_now  # deferred: start-up cost (5 modules)

    try:
        with path.open("a", encoding="utf-8") as fh:
            fh.write(f"{utc_now()} {text}\n")
    except OSError:
        _log().warning("cannot write %s: %s", path, text)


def _live(tree: Tree) -> bool:
    from fractal.store import reader  # deferred: start-up cost (12 modules)

    return any(r.status == "active" for r in reader.node_rows(tree.db_path))


def watch(tree: Tree, *, clock: Callable[[], float] = time.monotonic,
          sleep: Callable[[float], None] = time.sleep) -> int:
    """The watcher's loop (see the module docstring); returns the batches delivered.
    Returns 0 at once when another watcher holds the tree's lock."""
    from fractal.store.follow import db_token  # deferred: start-up cost (13 modules)

    fd = os.open(_lock_path(tree), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return 0
        delivered = 0
        token = db_token(tree.db_path)
        looked = began = clock()
        idle_since: float | None = None
        idle_exit = _seconds("FRACTAL_NOTIFY_IDLE_S", IDLE_EXIT_S)
        boot_grace = _seconds("FRACTAL_NOTIFY_BOOT_GRACE_S", BOOT_GRACE_S)
        first = True
        while True:
            if not ledger_exists(tree.db_path):  # destroyed: never recreate its database
                return delivered
            now_token = db_token(tree.db_path)
            if first or now_token != token or clock() - looked >= RECHECK_S:
                if not first and now_token != token:
                    sleep(SETTLE_S)
                    if not ledger_exists(tree.db_path):
                        return delivered
                first = False
                token = db_token(tree.db_path)
                looked = clock()
                try:
                    delivered += dispatch(tree) is not None
                except Exception:  # a broken hook or database must not kill the watcher
                    _log().exception("notify dispatch failed")
            if not ledger_exists(tree.db_path):
                return delivered
            if _live(tree):
                idle_since = None
            elif idle_since is None:
                idle_since = clock()
            elif clock() - idle_since >= idle_exit and clock() - began >= boot_grace:
                return delivered
            sleep(POLL_S)
    finally:
        os.close(fd)


def _seconds(name: str, default: float) -> float:
    """Seconds from the environment variable ``name`` (at least 0), else ``default`` (also
    when the value is not a number)."""
    try:
        return max(0.0, float(os.environ.get(name, default)))
    except ValueError:
        return default


def watcher_running(tree: Tree) -> bool:
    """True when a watcher holds the tree's notify lock."""
    path = _lock_path(tree)
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # closing drops a lock we just took
    return False


def watcher_marker(tree: Tree) -> str:
    """The launch marker the tree's watcher (and whatever it runs) carries: ``notify-``
    and 16 hex digits of the SHA-1 of the tree's data directory."""
    import hashlib  # deferred: start-up cost (3 modules)

    return "notify-" + hashlib.sha1(str(tree.data_dir).encode()).hexdigest()[:16]


def stop_watcher(tree: Tree) -> list[int]:
    """End the tree's watcher and anything it runs (TERM, KILL_GRACE_S, KILL), found by
    its marker; return the pids that survived. A destroy calls it before it removes the
    database, which a watcher would otherwise read (and recreate) afterwards."""
    from fractal.procs.processes import sweep_marker  # deferred: start-up cost (11 modules)

    return sweep_marker(watcher_marker(tree), grace=KILL_GRACE_S)


def ensure_watcher(tree: Tree) -> bool:
    """Start the tree's watcher, detached, when ``notify`` is set and none runs; True
    when one was started. Never raises: notifications must not block a start."""
    try:
        if notify_command(tree) is None or watcher_running(tree):
            return False
        from fractal.procs.processes import spawn_group  # deferred: start-up cost (11 modules)

        spawn_group([sys.executable, "-P", "-m", "fractal", "_notify", "--path", str(tree.repo)],
                    cwd=tree.repo, env=notify_env(dict(os.environ)),
                    marker=watcher_marker(tree))
        return True
    except Exception:
        _log().exception("could not start the notify watcher")
        return False


@dataclass(frozen=True)
class NotifySetting:
    """The root config's notify keys after a change."""

    command: str | None
    events: str | None


def configure(ctx: Context, command: str | None, events: str | None, *,
              off: bool = False) -> NotifySetting:
    """Set (or with ``off`` clear) the root config's ``notify`` command and
    ``notify_events`` (comma-separated kinds; '' means every kind). A None argument keeps
    that key; with all of them None it only reads. Raises Refused when anyone but the
    operator changes it (the watcher runs the command as the operator), FractalError
    naming an unknown kind."""
    from fractal.workspace.nodedir import update_config  # deferred: start-up cost (3 modules)

    tree = ctx.tree
    updates: dict[str, object] = {}
    if off or command is not None or events is not None:
        ctx.authorize("notify", tree.root)
    if off:
        updates = {"notify": None, "notify_events": None}
    if command is not None:
        if not command.strip():
            raise FractalError("the notify command is empty; pass a command, or --off")
        updates["notify"] = command.strip()
    if events is not None:
        from fractal.domain.attention.rules import Kind  # deferred: start-up cost (16 modules)

        _, problems = wanted_kinds(events, (k.value for k in Kind))
        if problems:
            raise FractalError("; ".join(problems))
        updates["notify_events"] = events.strip() or None
    if updates:
        update_config(tree.config_path, updates)
    config = tree.root_config()
    value = config.get("notify_events")
    return NotifySetting(notify_command(tree), value if isinstance(value, str) else None)
