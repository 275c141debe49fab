"""The generic ``command`` backend: any executable as an agent.

The prompt is written to the command's stdin; the loop's variables are in its
environment (``FRACTAL_SESSION_ID`` carries the session to continue, blank for a fresh
one). Output lines that are JSON objects with a known ``type`` are events:

    {"type": "session", "id": "abc"}      the session this invocation used
    {"type": "cost", "usd": 0.0123}       spend of this invocation so far (USD)
    {"type": "model", "id": "my-model"}   the model that served it
    {"type": "text", "text": "..."}       text to show
    {"type": "tool", "name": "bash", "detail": "pytest -q"}
    {"type": "usage_limit", "resets_at": 1796123340, "window": "five_hour"}
                                          the subscription window is used up until
                                          resets_at (epoch s; may be omitted): the loop
                                          waits for it instead of counting a failure
    {"type": "usage", "utilization": 0.96, "resets_at": 1796123340, "window": "five_hour"}
                                          the window is 96 % used (a warning)
    {"type": "api_error", "status": 529, "kind": "overloaded", "message": "..."}
                                          the model API failed (``status`` and ``kind``
                                          optional; the kind is classified from them
                                          when absent): a transient class makes the
                                          loop wait out a provider outage

Everything else is shown in the pane as text. Success is exit code 0, except after a
``usage_limit`` line: that launch is a usage-limit stop whatever its exit code.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from fractal.agents.base import (
    AgentEvent,
    CostEvent,
    Invocation,
    LaunchRequest,
    ModelEvent,
    ResultEvent,
    SessionEvent,
    TextEvent,
    ToolEvent,
    WindowEvent,
    route_problem,
)
from fractal.domain.agent_errors import USAGE_LIMIT, classify_api_error

SESSION_ENV = "FRACTAL_SESSION_ID"


class CommandParser:
    """Parses the optional JSON-lines protocol described in the module docstring."""

    def __init__(self) -> None:
        self.window_closed = False
        self.api_error: ResultEvent | None = None

    def feed(self, line: str) -> list[AgentEvent]:
        """One stdout line -> events; non-protocol lines become TextEvent."""
        stripped = line.strip()
        if stripped.startswith("{") and stripped.endswith("}"):
            failure = _api_error(stripped)
            if failure is not None:
                self.api_error = failure
                return [TextEvent(f"API error: {failure.error}")]
            event = _protocol_event(stripped)
            if event is not None:
                if isinstance(event, WindowEvent) and event.rejected:
                    self.window_closed = True
                return [event]
        return [TextEvent(line)]

    def finish(self) -> list[AgentEvent]:
        """After a ``usage_limit`` line, the launch's verdict: a usage-limit stop; after an
        ``api_error`` line, a failed final report naming its class and HTTP status."""
        if self.window_closed:
            return [ResultEvent(ok=False, error="usage limit reached",
                                error_kind=USAGE_LIMIT)]
        if self.api_error is not None:
            return [self.api_error]
        return []


def _api_error(text: str) -> ResultEvent | None:
    """An ``api_error`` line as a failed final report, else None."""
    if '"api_error"' not in text:
        return None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("type") != "api_error":
        return None
    status = data.get("status")
    code = status if isinstance(status, int) and not isinstance(status, bool) \
        and 100 <= status <= 599 else None
    message = data.get("message") if isinstance(data.get("message"), str) else ""
    hint = data.get("kind") if isinstance(data.get("kind"), str) else None
    kind = classify_api_error(code, hint, str(message))
    return ResultEvent(ok=False, error=str(message) or "API error", error_kind=kind,
                       api_status=code)


def _protocol_event(text: str) -> AgentEvent | None:
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # nested past the parser's depth: no event
        return None
    if not isinstance(data, dict):
        return None
    kind = data.get("type")
    if kind == "session" and isinstance(data.get("id"), str) and data["id"]:
        return SessionEvent(data["id"])
    if kind == "cost":
        usd = data.get("usd")
        if isinstance(usd, int | float) and not isinstance(usd, bool) and math.isfinite(usd) \
                and usd >= 0:
            return CostEvent(float(usd))
        return None
    if kind == "model" and isinstance(data.get("id"), str) and data["id"]:
        return ModelEvent(data["id"])
    if kind == "text" and isinstance(data.get("text"), str):
        return TextEvent(data["text"])
    if kind in ("usage_limit", "usage"):
        return _window_event(data, rejected=kind == "usage_limit")
    if kind == "tool" and isinstance(data.get("name"), str):
        detail = data.get("detail")
        return ToolEvent(data["name"], detail if isinstance(detail, str) else "")
    return None


def _finite(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _window_event(data: dict[str, object], *, rejected: bool) -> WindowEvent | None:
    """``usage_limit`` / ``usage`` lines; a warning without a utilization in [0, 1] (or a
    percentage above 1, taken as percent) is not an event."""
    resets = _finite(data.get("resets_at"))
    window = data.get("window")
    name = window if isinstance(window, str) and window.strip() else "unknown"
    resets_at = resets if resets is not None and resets > 0 else None
    if rejected:
        return WindowEvent(rejected=True, window=name, resets_at=resets_at)
    used = _finite(data.get("utilization"))
    if used is None or used < 0:
        return None
    if used > 1:
        used = used / 100 if used <= 100 else None
    if used is None:
        return None
    return WindowEvent(rejected=False, window=name, resets_at=resets_at, utilization=used)


class CommandBackend:
    """Runs ``words`` (argv) with the prompt on stdin.

    ``words[0]`` may be a bare name looked up on PATH or a path; a relative path resolves
    against the worktree (the agent's working directory).
    """

    name = "command"
    mints_session = True
    enforces_budget = False
    soft_interrupt: int | None = None
    requires_result = False  # success is exit code 0; the protocol has no final event
    providers: frozenset[str] = frozenset()

    def __init__(self, words: Sequence[str], worktree: Path) -> None:
        self.words = list(words)
        self.worktree = worktree

    def binary(self) -> str:
        """The executable named first in the agent setting."""
        return self.words[0]

    def _argv0(self) -> str:
        first = self.words[0]
        if "/" in first and not Path(first).is_absolute():
            return str((self.worktree / first).resolve())
        return first

    def invocation(self, request: LaunchRequest) -> Invocation:
        """argv = the configured words; stdin = the prompt; session via FRACTAL_SESSION_ID."""
        return Invocation(
            argv=[self._argv0(), *self.words[1:]],
            stdin=request.prompt.encode("utf-8", errors="replace"),
            env={SESSION_ENV: request.resume or ""},
        )

    def env(self, request: LaunchRequest, environ: Mapping[str, str]) -> dict[str, str | None]:
        """No reserved variables."""
        return {}

    def parser(self, request: LaunchRequest) -> CommandParser:
        """A fresh JSON-lines parser."""
        return CommandParser()

    def preflight(self, provider: str | None, env: Mapping[str, str]) -> str | None:
        """A command supports no provider route."""
        return route_problem(self, provider, env)
