"""Wake the supervisor out of any wait, promptly.

Every wait point in the loop (the agent's run, backoff, pacing) blocks on one
``Waker``. Anything that might change what the loop should do calls ``wake()``: the
agent's exit, a verb touching ``<node_dir>/.wake`` (seen by a watchdog observer), or
the periodic database poll. A wake carries no data: the waiter re-reads the real
state every time it wakes: the database is the truth, a wake only says "look now".
Waits block in the run's ``Clock``, so a fake clock turns them into instant advances. The
wake file and its touch belong to the control plane (``fractal.control``), which the verbs
share.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fractal.control import WAKE_FILE
from fractal.runtime.clock import Clock, SystemClock

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
        """The ``poll`` for an idle wait: IDLE_POLL_SECONDS while the wake file is watched,
        else POLL_SECONDS (no observer: the database poll is the only way to hear)."""
        return IDLE_POLL_SECONDS if self._observer is not None else POLL_SECONDS

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
        """Stop the observer, if any."""
        if self._observer is not None:
            with contextlib.suppress(Exception):  # shutting down anyway
                self._observer.stop()
            self._observer = None


def _reports_closes(observer: object) -> bool:
    """Whether ``observer`` reports a file closed after writing: only Linux's inotify
    does; FSEvents, kqueue and the polling observer report a rewrite as a modification."""
    try:
        # deferred: start-up cost (watchdog, 43 modules)
        from watchdog.observers.inotify import InotifyObserver
    except Exception:  # not Linux: the inotify module cannot load
        return False
    return isinstance(observer, InotifyObserver)
