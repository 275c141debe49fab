"""Human rendering of the loop for the tmux pane (seed: Observing progress).

The supervisor never prints: it calls a ``Reporter``. ``PaneReporter`` writes the
seed's banners and the agent's events, readably, to a text stream (the pane).
"""

from __future__ import annotations

import io
import sys
import threading
from typing import Protocol, TextIO

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

MAX_LINE = 2000  # characters of one output line shown in the pane


class Reporter(Protocol):
    """What the loop tells the person watching. Durations are seconds."""

    def line(self, text: str) -> None: ...
    def notice(self, text: str) -> None: ...
    def warning(self, text: str) -> None: ...
    def banner_open(self, text: str, major: bool = False) -> None: ...
    def banner_close(self, text: str, outcome: str, seconds: float, major: bool = False) -> None: ...
    def agent_event(self, event: AgentEvent) -> None: ...
    def raw_output(self, data: bytes) -> None: ...


def _clip(text: str) -> str:
    if len(text) <= MAX_LINE:
        return text
    return text[:MAX_LINE] + f" … [{len(text) - MAX_LINE} more characters]"


class PaneReporter:
    """Writes to ``stream`` (stdout: the pane), flushing every write; thread-safe."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stdout
        self._lock = threading.Lock()

    def _write(self, text: str) -> None:
        with self._lock:
            try:
                self.stream.write(text + "\n")
                self.stream.flush()
            except (OSError, ValueError):
                pass  # the pane went away; the database is the record

    def line(self, text: str) -> None:
        """One plain line."""
        self._write(_clip(text))

    def notice(self, text: str) -> None:
        """An informational notice."""
        self._write(f"[fractal] {text}")

    def warning(self, text: str) -> None:
        """A warning the operator should see."""
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
            try:
                self.stream.write(text)
                self.stream.flush()
            except (OSError, ValueError):
                pass


class RecordingReporter(PaneReporter):
    """Keeps everything in memory: for tests and for callers without a pane."""

    def __init__(self) -> None:
        super().__init__(stream=io.StringIO())

    @property
    def lines(self) -> list[str]:
        """Every line written so far."""
        stream = self.stream
        assert isinstance(stream, io.StringIO)
        return stream.getvalue().splitlines()
