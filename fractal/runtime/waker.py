"""Wake the supervisor out of any wait, promptly.

Every wait point in the loop (the agent's run, backoff, pacing) blocks on one
``Waker``. Anything that might change what the loop should do calls ``wake()``: the
agent's exit, a verb touching ``<node_dir>/.wake`` (seen by a watchdog observer), a
verb's ``NOTIFY`` on a PostgreSQL ledger's wake channel (heard by a listening thread,
``listen``: the verb may run on another machine, where this node's wake file is not), or
the periodic database poll. A wake carries no data: the waiter re-reads the real
state every time it wakes: the database is the truth, a wake only says "look now".
Waits block in the run's ``Clock``, so a fake clock turns them into instant advances. The
wake file and its touch belong to the control plane (``fractal.control``), which the verbs
share.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fractal.control import WAKE_FILE
from fractal.runtime.clock import Clock, SystemClock
from fractal.store.backend import database_url

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0  # the database-poll fallback: no wait ever sleeps longer than this
IDLE_POLL_SECONDS = 5.0
"""The poll of an idle wait (the pacing sleep, an approval gate) while the wake file is
watched: everything that ends such a wait (a signal, an approval) touches that file, so
the database poll is only the backstop and 50 idle nodes cost next to no CPU."""


class Waker:
    """A resettable wake-up flag shared by the waits of one supervisor."""

    def __init__(self, clock: Clock | None = None, *,
                 before_wait: Callable[[], None] | None = None) -> None:
        self.clock: Clock = clock or SystemClock()
        self._event = threading.Event()
        self._observer: Any = None
        self._listening: _Listening | None = None
        #: Called before every wait blocks (the pane writes what it held back).
        self.before_wait = before_wait

    def wake(self) -> None:
        """Interrupt the current (or the next) wait."""
        self._event.set()

    def wait(self, timeout: float | None, *, poll: float = POLL_SECONDS) -> bool:
        """Block up to ``timeout`` seconds (capped at ``poll``, default POLL_SECONDS) or
        until woken. A long idle wait whose verbs all touch the wake file may pass a
        longer ``poll`` to spend less CPU on database polls.

        Returns True when woken. The flag is cleared, so callers re-check state after
        every return whatever the result.
        """
        if self.before_wait is not None:
            self.before_wait()
        limit = poll if timeout is None else max(0.0, min(timeout, poll))
        woken = self.clock.wait(self._event, limit)
        self._event.clear()
        return woken

    @property
    def idle_poll(self) -> float:
        """The ``poll`` for an idle wait: IDLE_POLL_SECONDS while the wake file is watched
        or the wake channel listened on, else POLL_SECONDS (neither: the database poll is
        the only way to hear)."""
        heard = self._observer is not None or self._listening is not None
        return IDLE_POLL_SECONDS if heard else POLL_SECONDS

    def listen(self, db_path: Path, root: str, node: str) -> bool:
        """On a PostgreSQL ledger, start a thread listening on the tree's wake channel
        that wakes when ``node`` is notified (``store/wakes.py``); its session is opened
        again after a lost connection (a wake first: a notification may have been
        missed). Returns False (nothing started) on a SQLite ledger, or when the server
        refuses the first ``LISTEN`` (the poll carries on alone)."""
        if database_url(db_path) is None or self._listening is not None:
            return False
        # deferred: only a PostgreSQL tree's supervisor listens (1 module beyond the seam)
        from fractal.store import wakes

        try:
            first = wakes.Listener(_url(db_path), root)
        except Exception as exc:  # any refusal degrades to polling
            log.warning("wake channel unavailable (%s); polling the database only", exc)
            return False
        self._listening = _Listening(self, first, lambda: wakes.Listener(_url(db_path), root),
                                     node)
        return True

    def watch(self, directory: Path, filename: str = WAKE_FILE) -> bool:
        """Start a watchdog observer that wakes when ``directory/filename`` is written
        and closed, created, or moved into place (a touch writes and closes it).

        Only those kinds of event are asked of the kernel (where the observer is not
        inotify, which alone reports closes, a modification counts too): the directory also holds the
        supervisor's and the pane's logs, and each append to them was an event the
        observer's threads decoded and dispatched (and, in CPython 3.11, the handler's
        method name built per event stayed in the type attribute cache).
        Returns False (and polling carries on alone) when the observer cannot start.
        """
        try:
            # deferred: start-up cost (watchdog, 5 modules)
            from watchdog.events import (
                FileClosedEvent,
                FileCreatedEvent,
                FileModifiedEvent,
                FileMovedEvent,
                FileSystemEvent,
                FileSystemEventHandler,
            )

            # deferred: start-up cost (watchdog, 43 modules)
            from watchdog.observers import Observer
        except ImportError:  # pragma: no cover - watchdog is a hard dependency
            return False

        waker = self

        class _Handler(FileSystemEventHandler):
            def on_any_event(self, event: FileSystemEvent) -> None:
                paths = {str(event.src_path), str(getattr(event, "dest_path", "") or "")}
                if any(p.endswith("/" + filename) for p in paths):
                    waker.wake()

        try:
            observer = Observer()
            observer.daemon = True
            kinds: list[type[FileSystemEvent]] = [FileClosedEvent, FileCreatedEvent,
                                                  FileMovedEvent]
            if not _reports_closes(observer):  # a rewrite is only a modification there
                kinds.append(FileModifiedEvent)
            observer.schedule(_Handler(), str(directory), recursive=False, event_filter=kinds)
            observer.start()
        except Exception as exc:  # any observer failure degrades to polling
            log.warning("file watcher unavailable (%s); polling the database only", exc)
            return False
        self._observer = observer
        return True

    def close(self) -> None:
        """Stop the observer and the listening thread, if any."""
        if self._observer is not None:
            with contextlib.suppress(Exception):  # shutting down anyway
                self._observer.stop()
            self._observer = None
        if self._listening is not None:
            self._listening.stop()
            self._listening = None


def _url(db_path: Path) -> str:
    url = database_url(db_path)
    assert url is not None, "the ledger is not on PostgreSQL"
    return url


class _Listening:
    """The thread behind ``Waker.listen``: blocks in ``select`` on the listening session's
    socket and a stop pipe (no timeout: it costs nothing while no verb speaks), wakes the
    waker when its node is notified, and opens a new session 1 s after a lost one (then
    every 5 s while the server stays away)."""

    RETRY_SECONDS = (1.0, 5.0)

    def __init__(self, waker: Waker, first: Any, reopen: Callable[[], Any], node: str) -> None:
        self._waker, self._reopen, self._node = waker, reopen, node
        self._stop_r, self._stop_w = os.pipe()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(first,), daemon=True,
                                        name="wake-listener")
        self._thread.start()

    def stop(self) -> None:
        """End the thread (it closes its session); returns without waiting for it."""
        self._stopped.set()
        with contextlib.suppress(OSError):
            os.write(self._stop_w, b"x")

    def _run(self, listener: Any) -> None:
        retry = self.RETRY_SECONDS[0]
        try:
            while not self._stopped.is_set():
                if listener is None:
                    try:
                        listener = self._reopen()
                    except Exception:
                        if self._stopped.wait(retry):
                            return
                        retry = self.RETRY_SECONDS[1]
                        continue
                    retry = self.RETRY_SECONDS[0]
                    self._waker.wake()  # a notification may have come while it was away
                try:
                    self._serve(listener)
                except Exception as exc:  # the session was lost: open another
                    log.warning("wake channel lost (%s); listening again", exc)
                finally:
                    listener.close()
                    listener = None
        finally:
            if listener is not None:
                listener.close()
            for fd in (self._stop_r, self._stop_w):
                with contextlib.suppress(OSError):
                    os.close(fd)

    def _serve(self, listener: Any) -> None:
        """Wake for each notification of the node until stopped; raises when the session
        is lost."""
        while not self._stopped.is_set():
            ready, _, _ = select.select([listener.fileno(), self._stop_r], [], [])
            if self._stop_r in ready:
                return
            if self._node in listener.received():
                self._waker.wake()


def _reports_closes(observer: object) -> bool:
    """Whether ``observer`` reports a file closed after writing: only Linux's inotify
    does; FSEvents, kqueue and the polling observer report a rewrite as a modification."""
    try:
        # deferred: start-up cost (watchdog, 43 modules)
        from watchdog.observers.inotify import InotifyObserver
    except Exception:  # not Linux: the inotify module cannot load
        return False
    return isinstance(observer, InotifyObserver)
