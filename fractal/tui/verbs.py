"""How a dashboard key runs its verb: off the UI thread, with real streams, and with the
CLI's words for every outcome.

While the app runs, Textual has replaced ``sys.stdout`` and ``sys.stderr`` with capture
objects that have no encoding and no usable file descriptor, so a verb that prints, a
module imported lazily on its path that reads ``sys.stdout.encoding``, or a child process
handed ``sys.stdout`` would fail inside them. ``VerbStreams`` puts a real text file (a
temporary one, utf-8, with a real descriptor) in their place for the verb's duration,
one verb at a time, and hands back what the verb wrote so it shows in the notification
instead of on the screen.

A refusal (``FractalError``) is notified as ``LABEL: why``. Any other exception is
fractal's fault: its traceback is saved to a crash log exactly as the CLI's exit 3 does
(``fractal.crashlog``), and the notification names the file.
"""

from __future__ import annotations

import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from fractal.lifecycle.merge.squash import MergeResult

__all__ = ["Outcome", "VerbStreams", "call_verb", "fault", "merge_line", "outcome_lines"]


class VerbStreams:
    """The streams a verb runs with: one temporary text file shared by the app's verbs,
    installed as ``sys.stdout`` and ``sys.stderr`` under a lock while one runs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._file: IO[str] | None = None

    @contextmanager
    def held(self) -> Iterator[list[str]]:
        """Swap the real file in for the block; the yielded list receives the lines the
        block wrote, once it has ended."""
        with self._lock:
            if self._file is None:
                self._file = tempfile.TemporaryFile(  # noqa: SIM115 - lives with the app
                    "w+", buffering=1, encoding="utf-8", errors="replace")
            handle = self._file
            start = handle.seek(0, 2)
            out, err = sys.stdout, sys.stderr
            sys.stdout = sys.stderr = handle
            written: list[str] = []
            try:
                yield written
            finally:
                sys.stdout, sys.stderr = out, err
                handle.flush()
                handle.seek(start)
                written.extend(line for line in handle.read().splitlines() if line.strip())

    def close(self) -> None:
        """Delete the file (the app has ended)."""
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def outcome_lines(result: object) -> list[str]:
    """The lines the CLI prints for a verb's ``result``: a steering verb's ``Signalled``
    rows (``skipped: ...`` for a refused node, a note when nothing was acted on), an
    approval's ``approved BRANCH step N (NAME)``, a string as it is."""
    # deferred: start-up cost (19 modules)
    from fractal.lifecycle.approve import Approved, approved_line

    # deferred: start-up cost (39 modules)
    from fractal.lifecycle.steering.signal import result_lines

    if isinstance(result, Approved):
        return [approved_line(result)]
    if isinstance(result, str):
        return [result]
    if isinstance(result, list):
        return result_lines(list(result))
    return result_lines([result])


@dataclass(frozen=True)
class Outcome:
    """How a verb ended: ``text`` as notified and whether it ``failed``; ``crash_log``
    names the saved traceback of an unexpected exception."""

    text: str
    failed: bool
    crash_log: str | None = None


def call_verb(streams: VerbStreams, data_dir: Path, label: str,
              verb: Callable[[], object]) -> Outcome:
    """Run ``verb`` with the app's real ``streams`` and word its outcome as the CLI would,
    prefixed ``LABEL: ``; an unexpected exception's traceback is saved first (a crash log
    under the tree's ``data_dir``, see ``fault``)."""
    from fractal.errors import FractalError  # deferred: start-up cost (3 modules)

    written: list[str] = []
    try:
        with streams.held() as written:
            result = verb()
    except FractalError as exc:
        return Outcome(f"{label}: {exc}", failed=True)
    except Exception as exc:  # fractal's fault: keep the traceback, say where
        return fault(data_dir, label, exc)
    lines = outcome_lines(result) + written
    return Outcome(f"{label}: " + "; ".join(lines[:3]), failed=False)


def fault(data_dir: Path, label: str, exc: Exception) -> Outcome:
    """Save the traceback of ``exc``, an unexpected exception of the key ``label``, to a
    crash log (as the CLI's exit 3 does: in ``data_dir``'s ``logs/``, the tree's data
    directory, else the state directory) and word the notification that names it."""
    # deferred: start-up cost (1 module)
    from fractal.crashlog import CrashSite, crash_line, save_crash

    site = CrashSite(data_dir=data_dir, argv=["open", f"(key: {label})"])
    path = save_crash(exc, site)
    text = crash_line(exc, path) if path is not None else \
        f"Internal error ({type(exc).__name__}: {exc}); no crash log could be written"
    return Outcome(f"{label}: {text}", failed=True,
                   crash_log=str(path) if path is not None else None)


def merge_line(result: MergeResult) -> str:
    """The merge's outcome as one notification line: the CLI's stderr wording
    (``lifecycle.merge.squash.outcome_line``), then its notices; for nothing new, the notices."""
    from fractal.lifecycle.merge.squash import outcome_line  # deferred: start-up cost (73 modules)

    line = outcome_line(result)
    if line is None:  # nothing new: its first notice already says so
        return "; ".join(result.notices) or (f"nothing new to merge: {result.target} "
                                             f"already holds all of {result.child}'s work")
    return "; ".join([line, *result.notices])
