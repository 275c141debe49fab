"""The agent's stdout during one launch: read it, parse it, record what it says.

``StreamPump`` reads stdout line by line with a bounded buffer (a multi-megabyte line is
skipped, invalid UTF-8 is replaced) and feeds the backend's parser; ``Collector`` shows
each event in the pane and flushes cost, token usage, session and model to the step row
as they arrive, so a killed step keeps the last figure. stderr never comes here: it goes
to ``<agent>.err`` and is never parsed as events.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import IO

from fractal.agents.base import (
    AgentEvent,
    CostEvent,
    ModelEvent,
    NoticeEvent,
    ResultEvent,
    SessionEvent,
    StreamParser,
    Usage,
    UsageEvent,
    WindowEvent,
)
from fractal.runtime.clock import Clock, SystemClock
from fractal.runtime.pane import Reporter
from fractal.store.ledger import Ledger

__all__ = ["MAX_LINE_BYTES", "Collector", "StreamPump"]

log = logging.getLogger(__name__)

FLUSH_INTERVAL = 0.5  # seconds between live cost/usage writes to the step row
MAX_STEP_USD = 1e6  # a single launch reporting more is treated as a broken report

MAX_LINE_BYTES = 8 * 1024 * 1024  # one stdout line longer than this is skipped, not buffered


class StreamPump(threading.Thread):
    """Reads ``stream`` line by line (bounded), parses, and hands events to ``sink``.

    ``stream_error`` is set when the parser raised (the rest of the stream is then only
    drained) or the pipe failed.
    """

    def __init__(self, stream: IO[bytes], parser: StreamParser,
                 sink: Callable[[AgentEvent], None]) -> None:
        super().__init__(daemon=True, name="fractal-stream")
        self.stream = stream
        self.parser = parser
        self.sink = sink
        self.stream_error: str | None = None

    def _emit(self, events: list[AgentEvent]) -> None:
        for event in events:
            self.sink(event)

    def _parse(self, line: str) -> None:
        if self.stream_error is not None:
            return
        try:
            self._emit(self.parser.feed(line))
        except Exception as exc:  # a parser bug must not kill the pump
            self.stream_error = f"{type(exc).__name__}: {exc}"
            log.exception("stream parser failed")

    def run(self) -> None:
        """Pump until end of file, then let the parser flush."""
        skipping = 0
        try:
            while True:
                chunk = self.stream.readline(MAX_LINE_BYTES)
                if not chunk:
                    break
                if skipping or (len(chunk) >= MAX_LINE_BYTES and not chunk.endswith(b"\n")):
                    skipping += len(chunk)
                    if chunk.endswith(b"\n"):
                        self._emit([NoticeEvent(
                            f"skipped an over-long output line ({skipping} bytes)")])
                        skipping = 0
                    continue
                self._parse(chunk.rstrip(b"\r\n").decode("utf-8", errors="replace"))
            if self.stream_error is None:
                self._emit(self.parser.finish())
        except (OSError, ValueError) as exc:
            self.stream_error = self.stream_error or f"{type(exc).__name__}: {exc}"


class Collector:
    """Applies events from the pump: the pane, and live flushes to step ``step_id``.

    Keeps the last figures: ``cost`` (USD; a CostEvent replaces, never adds), ``usage``
    (this invocation's tokens), ``session``, ``model``, the ``result`` event and when it
    arrived (``result_at``, ``clock`` seconds), ``retries`` (API retries announced),
    ``window`` (the usage window the CLI reported closed, if any) and ``warning`` (the
    last near-limit report of an open window).
    """

    def __init__(self, ledger: Ledger, reporter: Reporter, step_id: int,
                 clock: Clock | None = None) -> None:
        self.clock: Clock = clock or SystemClock()
        self.ledger = ledger
        self.reporter = reporter
        self.step_id = step_id
        self.session: str | None = None
        self.cost: float | None = None
        self.usage: Usage | None = None
        self.model: str | None = None
        self.result: ResultEvent | None = None
        self.result_at: float | None = None
        self.retries = 0
        self.window: WindowEvent | None = None
        self.warning: WindowEvent | None = None
        self._flushed_at = -FLUSH_INTERVAL  # clock time of the last cost/usage write
        self._dirty = False

    def __call__(self, event: AgentEvent) -> None:
        self.reporter.agent_event(event)
        try:
            if isinstance(event, CostEvent):
                if not 0 <= event.usd <= MAX_STEP_USD:  # a broken report, not a real figure
                    log.warning("ignored an implausible cost report of %r USD", event.usd)
                    return
                self.cost = event.usd
                self._dirty = True
            elif isinstance(event, UsageEvent):
                usage = (event.input_tokens, event.cached_input_tokens, event.output_tokens)
                if usage != self.usage:
                    self.usage = usage
                    self._dirty = True
            elif isinstance(event, SessionEvent) and _clean_id(event.session) != self.session:
                self.session = _clean_id(event.session)
                self.ledger.set_step_session(self.step_id, self.session)
            elif isinstance(event, ModelEvent) and _clean_id(event.model) != self.model:
                self.model = _clean_id(event.model)
                self.ledger.set_step_model(self.step_id, self.model)
            elif isinstance(event, WindowEvent):
                if event.rejected:
                    self.window = event
                else:
                    self.warning = event
            elif isinstance(event, NoticeEvent) and event.retry:
                self.retries += 1
            elif isinstance(event, ResultEvent):
                self.result = event
                self.result_at = self.clock.monotonic()
                self.flush()
            if self._dirty and self.clock.monotonic() - self._flushed_at >= FLUSH_INTERVAL:
                self.flush()
        except Exception as exc:  # a contended write must not lose the stream
            log.warning("could not record %s on step %s: %s", type(event).__name__,
                        self.step_id, exc)

    def flush(self) -> None:
        """Write the latest cost and token usage to the step row (at most every
        FLUSH_INTERVAL seconds while streaming, and once more when the stream ends), so a
        killed step keeps its last figure and a flood of events costs few writes."""
        if not self._dirty:
            return
        self._dirty = False
        self._flushed_at = self.clock.monotonic()
        if self.cost is not None:
            self.ledger.set_step_cost(self.step_id, self.cost)
        if self.usage is not None:
            self.ledger.set_step_usage(self.step_id, *self.usage)


def _clean_id(text: str) -> str:
    """An id safe for the database and the environment: no NULs, no lone surrogates,
    bounded length."""
    cleaned = text.replace("\0", "").encode("utf-8", errors="replace").decode("utf-8")
    return cleaned[:200]
