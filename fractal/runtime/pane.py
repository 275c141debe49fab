"""Human rendering of the loop for the tmux pane.

The supervisor never prints: it calls a ``Reporter``. ``PaneReporter`` writes the
run, iteration and step banners and the agent's events, readably, to a text stream (the pane), and the
same text to a transcript file (``<node_dir>/pane.log``) that outlives the pane: the
tmux session ends with its run, and a user back from a night away still reads what
the agent said. The transcript rotates at TRANSCRIPT_BYTES into one ``pane.log.1``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import sys
import threading
from pathlib import Path
from typing import BinaryIO, Protocol, TextIO

from fractal.agents.base import (
    AgentEvent,
    CostEvent,
    ModelEvent,
    NoticeEvent,
    ResultEvent,
    SessionEvent,
    TextEvent,
    ToolEvent,
)
from fractal.domain.termtext import terminal_text

log = logging.getLogger(__name__)

MAX_LINE = 2000  # characters of one output line shown in the pane
TRANSCRIPT_BYTES = 10 * 1024 * 1024  # pane.log rotates to pane.log.1 past this size


class Reporter(Protocol):
    """What the loop tells the person watching. Durations are seconds."""

    def line(self, text: str) -> None: ...
    def notice(self, text: str) -> None: ...
    def warning(self, text: str) -> None: ...
    def banner_open(self, text: str, major: bool = False) -> None: ...
    def banner_close(self, text: str, outcome: str, seconds: float, major: bool = False) -> None: ...
    def agent_event(self, event: AgentEvent) -> None: ...
    def raw_output(self, data: bytes) -> None: ...
    def hold(self) -> None: ...
    def release(self) -> None: ...


def _clip(text: str) -> str:
    if len(text) <= MAX_LINE:
        return text
    return text[:MAX_LINE] + f" … [{len(text) - MAX_LINE} more characters]"


class _Transcript:
    """The pane's text appended to a file as is (UTF-8, invalid characters replaced), one
    unbuffered write per call, rotated into one ``<name>.1`` before a write that would
    take it to ``max_bytes``.

    Before each write it checks that the path is still the file it writes: replaced by
    a FIFO, a directory or a symbolic link, the transcript stops (rotation would never
    run, and the open, unlinked file would grow without bound); deleted, it starts a
    new file. A write that fails (a full disk, a removed node dir) drops the text: the
    rows are the record. (A ``logging`` handler did this before; its record, locks and
    text-file ``tell`` cost about ten times the write.)
    """

    def __init__(self, path: Path, max_bytes: int) -> None:
        self.path = str(path)
        self.max_bytes = max_bytes
        self.stopped = False
        self._fh: BinaryIO | None = None
        self._size = 0
        self._open()

    def _open(self) -> None:
        fh = open(self.path, "ab", buffering=0)  # noqa: SIM115 - kept open for the run
        self._size = os.fstat(fh.fileno()).st_size
        self._fh = fh

    def _close(self) -> None:
        fh, self._fh = self._fh, None
        if fh is not None:
            with contextlib.suppress(OSError):
                fh.close()

    def write(self, text: str) -> None:
        """Append ``text`` unless the path stopped being this transcript's file."""
        if self.stopped:
            return
        try:
            if self._fh is not None:
                try:
                    mode = os.lstat(self.path).st_mode
                except FileNotFoundError:
                    self._close()  # reopened (created afresh) below
                else:
                    if not stat.S_ISREG(mode):
                        self.stopped = True
                        self._close()
                        return
            data = text.encode("utf-8", errors="replace")
            if self._fh is None:
                self._open()
            elif self.max_bytes > 0 and self._size and self._size + len(data) >= self.max_bytes:
                self._rotate()
            assert self._fh is not None
            self._fh.write(data)
            self._size += len(data)
        except OSError:
            self._close()  # tried again at the next write

    def _rotate(self) -> None:
        self._close()
        backup = self.path + ".1"
        with contextlib.suppress(FileNotFoundError):
            os.remove(backup)
        os.rename(self.path, backup)
        self._open()


def _transcript(path: Path, max_bytes: int) -> _Transcript | None:
    """The transcript writing to ``path`` (rotating at ``max_bytes``), or None when the
    file cannot be opened or is not a regular file (a FIFO would block; the pane still
    works)."""
    if path.is_symlink() or (path.exists() and not path.is_file()):
        return None
    try:
        return _Transcript(path, max_bytes)
    except OSError:
        return None


class PaneReporter:
    """Writes to ``stream`` (stdout: the pane), flushing every write; thread-safe.

    ``transcript``, when given, receives the same text (see the module docstring);
    ``transcript_bytes`` is its rotation size in bytes.
    """

    def __init__(self, stream: TextIO | None = None, *, transcript: Path | None = None,
                 transcript_bytes: int = TRANSCRIPT_BYTES) -> None:
        self.stream = stream if stream is not None else sys.stdout
        self._lock = threading.Lock()
        self._log = None if transcript is None else _transcript(transcript, transcript_bytes)
        self._held: list[str] | None = None  # text kept back by ``hold``

    def hold(self) -> None:
        """Keep what is written from now on until ``release`` (one write to the pane and
        one to the transcript then, in order). The loop holds from a step's end to the
        next agent's start, so the pane's program is woken once per boundary, not once per
        banner; every wait, command and the run's end releases first."""
        with self._lock:
            if self._held is None:
                self._held = []

    def release(self) -> None:
        """Write what ``hold`` kept, and write straight through again."""
        with self._lock:
            held, self._held = self._held, None
            if held:
                self._emit("".join(held))

    def _emit(self, text: str) -> None:
        """Write ``text`` to the pane and the transcript (or keep it while held); the caller
        holds the lock. Escape sequences and control characters are removed first
        (``terminal_text``): the text is the node's."""
        text = terminal_text(text)
        if self._held is not None:
            self._held.append(text)
            return
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            pass  # the pane went away; the database is the record
        if self._log is not None:
            self._log.write(text)

    def _write(self, text: str) -> None:
        with self._lock:
            self._emit(text + "\n")

    def line(self, text: str) -> None:
        """One plain line."""
        self._write(_clip(text))

    def notice(self, text: str) -> None:
        """An informational notice."""
        self._write(f"[fractal] {text}")

    def warning(self, text: str) -> None:
        """A warning the operator should see; also logged (``supervisor.log``)."""
        text = _clip(text)
        log.warning("%s", text)
        self._write(f"[fractal] WARNING: {text}")

    def banner_open(self, text: str, major: bool = False) -> None:
        """``=== Iteration 3 of 10 at … ===`` (major) or ``--- Step 3/5 (EXECUTE) ---``."""
        mark = "===" if major else "---"
        self._write(f"\n{mark} {text} {mark}")

    def banner_close(self, text: str, outcome: str, seconds: float, major: bool = False) -> None:
        """``--- Step 3/5 (EXECUTE): done (600s) ---`` or the iteration's completion line."""
        mark = "===" if major else "---"
        took = f"{round(seconds)}s"
        if major:
            self._write(f"{mark} {text} {outcome} ({took}) {mark}")
        else:
            self._write(f"{mark} {text}: {outcome} ({took}) {mark}")

    def agent_event(self, event: AgentEvent) -> None:
        """Render one parsed agent event."""
        if isinstance(event, TextEvent):
            for part in event.text.splitlines() or [""]:
                self._write(_clip(part))
        elif isinstance(event, ToolEvent):
            self._write(_clip(f"  > {event.name}" + (f": {event.detail}" if event.detail else "")))
        elif isinstance(event, NoticeEvent):
            self._write(_clip(f"  ! {event.text}"))
        elif isinstance(event, SessionEvent):
            self._write(f"  (session {event.session})")
        elif isinstance(event, ModelEvent):
            self._write(f"  (model {event.model})")
        elif isinstance(event, CostEvent):
            self._write(f"  (cost ${event.usd:.4f})")
        elif isinstance(event, ResultEvent) and not event.ok:
            self._write(_clip(f"  ! agent reported an error: {event.error}"))

    def raw_output(self, data: bytes) -> None:
        """Bytes from setup.sh, shown as they come (invalid UTF-8 replaced)."""
        text = data.decode("utf-8", errors="replace")
        with self._lock:
            self._emit(text)
