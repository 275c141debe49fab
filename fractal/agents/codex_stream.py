"""Codex's ``exec --json`` stream, line by line, as events (the pinned CLI's ``--json``
events; docs/agents.md, "Codex").

- ``thread.started``: ``thread_id`` is the session (pass it to ``resume``).
- ``item.started``/``item.completed``: a ``command_execution`` (or file change, MCP call,
  web search) is a tool, shown once, with a preview of its output when it completes; an
  ``agent_message`` is text; an item of type ``error`` is a non-fatal warning.
- ``error`` lines are transient notices (``Reconnecting... n/N`` counts as an API retry);
  only ``turn.failed`` is fatal: ResultEvent ok=False, classified from its message.
- ``turn.completed``: success. Its ``usage`` is cumulative over the thread, so a resumed
  invocation subtracts the thread's usage before it (``prior``) to report its own tokens.
- Codex reports no dollars: no CostEvent, ever (cost stays NULL until priced, never 0).
"""

from __future__ import annotations

from pathlib import Path

from fractal.agents.base import (
    AgentEvent,
    NoticeEvent,
    ResultEvent,
    SessionEvent,
    TextEvent,
    ToolEvent,
    Usage,
    UsageEvent,
)
from fractal.agents.codex_rollout import find_rollout, read_rollout
from fractal.agents.jsonl import json_object, preview, short, text, whole
from fractal.domain.agent.errors import classify_api_error, status_in_message

__all__ = ["CodexParser", "usage_delta"]

_TOOL_ITEMS = {"command_execution": "exec", "file_change": "edit", "mcp_tool_call": "mcp",
               "web_search": "web_search"}


def usage_delta(cumulative: Usage, prior: Usage | None) -> Usage:
    """This invocation's share of a thread's ``cumulative`` usage.

    ``prior`` is the thread's usage before it (None: a fresh thread). A component that
    went down means the thread was not the one ``prior`` describes: the figure is then
    taken whole.
    """
    if prior is None or any(c < p for c, p in zip(cumulative, prior, strict=True)):
        return cumulative
    return (cumulative[0] - prior[0], cumulative[1] - prior[1], cumulative[2] - prior[2])


class CodexParser:
    """Stateful parser for one ``codex exec --json`` launch (module docstring).

    ``prior`` is the thread's cumulative usage before this launch (``LaunchRequest.
    prior_usage``). ``sessions`` is ``$CODEX_HOME/sessions``: when given, the end of the
    stream reads this launch's rollout there (``since``: the launch's start, epoch s) for
    the usage-window facts Codex does not print (``agents.codex_rollout``).
    """

    def __init__(self, prior: Usage | None = None, *, sessions: Path | None = None,
                 since: float = 0.0) -> None:
        self.prior = prior
        self.seen_tools: set[str] = set()
        self.cumulative: Usage | None = None
        self.sessions = sessions
        self.since = since
        self.thread: str | None = None
        self.failure: ResultEvent | None = None

    def feed(self, line: str) -> list[AgentEvent]:
        """One stdout line -> events."""
        data = json_object(line)
        if data is None:
            return [TextEvent(text(line))] if line.strip() else []
        kind = data.get("type")
        if kind == "thread.started" and text(data.get("thread_id")):
            self.thread = text(data.get("thread_id"))
            return [SessionEvent(self.thread)]
        if kind in ("item.started", "item.completed"):
            item = data.get("item")
            return self._item(item, kind == "item.completed") if isinstance(item, dict) else []
        if kind == "error":
            message = text(data.get("message")) or "error"
            return [NoticeEvent(message, retry=message.startswith("Reconnecting"))]
        if kind == "turn.completed":
            return [*self._usage(data.get("usage")), ResultEvent(ok=True)]
        if kind == "turn.failed":
            error = data.get("error")
            raw = text(error.get("message")) if isinstance(error, dict) else ""
            self.failure = _failure(raw)
            return [*self._usage(data.get("usage")), self.failure]
        return []

    def finish(self) -> list[AgentEvent]:
        """The rollout's usage-window facts: a warning as a WindowEvent; a closed window
        as a rejected WindowEvent followed by a ResultEvent of kind ``usage_limit`` that
        replaces the failure ``turn.failed`` reported."""
        if self.sessions is None:
            return []
        path = find_rollout(self.sessions, self.thread, self.since)
        if path is None:
            return []
        facts = read_rollout(path)
        events: list[AgentEvent] = []
        if facts.warning is not None:
            events.append(facts.warning)
        if facts.limit is not None and self.failure is not None:
            events.append(facts.limit)
            events.append(ResultEvent(ok=False, error=self.failure.error,
                                      error_kind="usage_limit"))
        return events

    def _item(self, item: dict[str, object], completed: bool) -> list[AgentEvent]:
        kind = text(item.get("type"))
        if kind == "agent_message":
            body = text(item.get("text"))
            return [TextEvent(body)] if completed and body.strip() else []
        if kind == "error":
            return [NoticeEvent(f"warning: {text(item.get('message'))}")] if completed else []
        if kind not in _TOOL_ITEMS:
            return []
        events: list[AgentEvent] = []
        ident = text(item.get("id")) or str(id(item))
        if ident not in self.seen_tools:
            self.seen_tools.add(ident)
            events.append(ToolEvent(_TOOL_ITEMS[kind], _tool_detail(kind, item)))
        if completed and kind == "command_execution":
            events += preview(text(item.get("aggregated_output")))
            code = whole(item.get("exit_code"))
            if code:
                events.append(TextEvent(f"    (exit {code})"))
        return events

    def _usage(self, usage: object) -> list[AgentEvent]:
        if not isinstance(usage, dict):
            return []
        current = (whole(usage.get("input_tokens")) or 0,
                   whole(usage.get("cached_input_tokens")) or 0,
                   whole(usage.get("output_tokens")) or 0)
        if self.cumulative is not None:  # keep the largest figure seen in this launch
            current = (max(current[0], self.cumulative[0]), max(current[1], self.cumulative[1]),
                       max(current[2], self.cumulative[2]))
        self.cumulative = current
        return [UsageEvent(*usage_delta(current, self.prior))]


def _tool_detail(kind: str, item: dict[str, object]) -> str:
    if kind == "command_execution":
        return short(text(item.get("command")))
    if kind == "file_change":
        changes = item.get("changes")
        paths = [text(c.get("path")) for c in changes if isinstance(c, dict)] \
            if isinstance(changes, list) else []
        return short(", ".join(p for p in paths if p))
    if kind == "mcp_tool_call":
        return short(f"{text(item.get('server'))}.{text(item.get('tool'))}".strip("."))
    return short(text(item.get("query")))


def _failure(raw: str) -> ResultEvent:
    """``turn.failed``: classify the message; a JSON error body is unwrapped to its text."""
    message, hint = raw, None
    body = json_object(raw)
    error = body.get("error") if body else None
    if isinstance(error, dict):
        hint = text(error.get("code")) or text(error.get("type")) or None
        inner = text(error.get("message"))
        kind_word = text(error.get("type"))
        message = f"{kind_word}: {inner}" if kind_word and inner else inner or raw
    status = status_in_message(raw) if body is None else None
    return ResultEvent(ok=False, error=message or "turn failed",
                       error_kind=classify_api_error(status, hint, message), api_status=status)
