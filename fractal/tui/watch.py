"""Wake the dashboard when the tree's database files change (watchdog only wakes: every
wake re-checks the real state, and the dashboard's 1 s poll carries on without it)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any


class DbWatch:
    """A watchdog observer on the directory of the tree's database; ``pending()`` is True
    (once) after any change to a file whose name starts with the database's."""

    def __init__(self) -> None:
        self._flag = threading.Event()
        self._observer: Any = None

    def start(self, db_path: Path, on_change: Callable[[], None] | None = None) -> bool:
        """Watch ``db_path``'s directory, calling ``on_change`` (from the observer's thread,
        so it must be quick and thread-safe) at each change; False when watchdog cannot
        (polling then)."""
        try:
            # deferred: start-up cost (watchdog, 24 modules)
            from watchdog.events import FileSystemEvent, FileSystemEventHandler

            # deferred: start-up cost (watchdog, 64 modules)
            from watchdog.observers import Observer
        except ImportError:
            return False
        flag, stem = self._flag, db_path.name

        class _Handler(FileSystemEventHandler):
            def on_any_event(self, event: FileSystemEvent) -> None:
                if Path(str(event.src_path)).name.startswith(stem):
                    flag.set()
                    if on_change is not None:
                        on_change()

        try:
            observer = Observer()
            observer.schedule(_Handler(), str(db_path.parent), recursive=False)
            observer.daemon = True
            observer.start()
        except Exception:  # inotify limits and the like: the poll carries on
            return False
        self._observer = observer
        return True

    def pending(self) -> bool:
        """True once after a change since the last call."""
        if self._flag.is_set():
            self._flag.clear()
            return True
        return False

    def close(self) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer = None
