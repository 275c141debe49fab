"""Claude Code's ``--output-format stream-json --verbose`` stream, line by line, as events.

The events are those the pinned CLI prints (docs/agents.md, "Claude Code"); the rules here:

- ``session_id`` (on every line) names the session: SessionEvent when first seen or changed.
- ``assistant``: text and tool use for the pane; ``message.model`` of a top-level message
  (no ``parent_tool_use_id``) is the served model, except the ``<synthetic>`` stand-in the
  CLI writes for an API error, whose ``error`` field hints at the failure class.
- ``user``: tool results (a short preview) and interruption notices.
- ``system/api_retry``: a NoticeEvent with ``retry=True``; its ``error`` is a class hint.
- ``result``: success is ``is_error == false`` — never the ``subtype``, since an API failure
  arrives as ``subtype: success, is_error: true``. ``error_max_budget_usd`` is a clean stop
  at ``--max-budget-usd``. ``total_cost_usd`` covers this process only (a resumed session
  reports that invocation's cost), so it is a CostEvent that replaces, never adds.
  Token usage comes from ``modelUsage`` (right even when ``usage`` is zeroed on a budget
  stop), else ``usage``.
- ``rate_limit_event`` (subscriber logins only): ``status: rejected`` WITH ``resetsAt`` and
  ``rateLimitType`` is a closed usage window — a rejected WindowEvent, and the result that
  follows becomes a failure of kind ``usage_limit``; ``rejected`` without them is an
  ordinary transient 429. ``allowed_warning`` carries ``utilization``: a warning
  WindowEvent.
- ``stream_event`` and ``system/status`` (only with ``--include-partial-messages``) and
  unknown types are ignored; a line that is not JSON is shown as text.
"""

from __future__ import annotations

from fractal.agents.base import (
    AgentEvent,
    CostEvent,
    ModelEvent,
    NoticeEvent,
    ResultEvent,
    SessionEvent,
    TextEvent,
    ToolEvent,
    UsageEvent,
    WindowEvent,
)
from fractal.agents.jsonl import json_object, num, preview, short, text, whole
from fractal.domain.agent.errors import USAGE_LIMIT, classify_api_error

__all__ = ["SYNTHETIC_MODEL", "ClaudeParser", "tool_detail"]

SYNTHETIC_MODEL = "<synthetic>"
BUDGET_SUBTYPE = "error_max_budget_usd"
INTERRUPTED_SUBTYPE = "error_during_execution"
_DETAIL_KEYS = ("command", "file_path", "notebook_path", "path", "pattern", "url", "query",
                "description", "prompt")


def tool_detail(tool_input: object) -> str:
    """A one-line summary of a tool call's input: its command, path, pattern or URL."""
    if not isinstance(tool_input, dict):
        return ""
    for key in _DETAIL_KEYS:
        value = text(tool_input.get(key))
        if value.strip():
            return short(value)
    return ""


class ClaudeParser:
    """Stateful parser for one ``claude -p`` launch (module docstring).

    ``cli_priced`` False (a provider route) suppresses CostEvent: the CLI prices tokens at
    Anthropic's list rates, which are not what the route charges.
    """

    def __init__(self, *, cli_priced: bool = True) -> None:
        self.cli_priced = cli_priced
        self.session: str | None = None
        self.model: str | None = None
        self.error_hint: str | None = None
        self.window_closed: WindowEvent | None = None

    def feed(self, line: str) -> list[AgentEvent]:
        """One stdout line -> events."""
        data = json_object(line)
        if data is None:
            return [TextEvent(text(line))] if line.strip() else []
        events: list[AgentEvent] = []
        session = text(data.get("session_id"))
        if session and session != self.session:
            self.session = session
            events.append(SessionEvent(session))
        kind = data.get("type")
        if kind == "assistant":
            events += self._assistant(data)
        elif kind == "user":
            events += self._user(data)
        elif kind == "system" and data.get("subtype") == "api_retry":
            events.append(self._retry(data))
        elif kind == "rate_limit_event":
            events += self._window(data)
        elif kind == "result":
            events += self._result(data)
        return events

    def finish(self) -> list[AgentEvent]:
        """No trailing events: a stream without ``result`` is judged by the loop."""
        return []

    # -- line types ---------------------------------------------------------------------

    def _assistant(self, data: dict[str, object]) -> list[AgentEvent]:
        events: list[AgentEvent] = []
        message = data.get("message")
        if not isinstance(message, dict):
            return events
        model = text(message.get("model"))
        if data.get("error"):
            self.error_hint = text(data.get("error")) or self.error_hint
        elif model and model != SYNTHETIC_MODEL and data.get("parent_tool_use_id") is None \
                and model != self.model:
            self.model = model
            events.append(ModelEvent(model))
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and text(block.get("text")).strip():
                events.append(TextEvent(text(block.get("text"))))
            elif block.get("type") == "tool_use":
                events.append(ToolEvent(text(block.get("name")) or "tool",
                                        tool_detail(block.get("input"))))
        return events

    def _user(self, data: dict[str, object]) -> list[AgentEvent]:
        message = data.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        events: list[AgentEvent] = []
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_result":
                events += preview(_result_text(block.get("content")))
            elif block.get("type") == "text" and text(block.get("text")).startswith("[Request"):
                events.append(NoticeEvent(text(block.get("text"))))
        return events

    def _retry(self, data: dict[str, object]) -> NoticeEvent:
        error = text(data.get("error")) or "error"
        self.error_hint = error
        status = whole(data.get("error_status"))
        attempt, most = whole(data.get("attempt")), whole(data.get("max_retries"))
        delay = num(data.get("retry_delay_ms"))
        parts = [f"API retry {attempt or '?'}/{most or '?'}: {error}"]
        if status is not None:
            parts.append(f" (HTTP {status})")
        if delay is not None:
            parts.append(f", next try in {delay / 1000:.1f}s")
        return NoticeEvent("".join(parts), retry=True)

    def _window(self, data: dict[str, object]) -> list[AgentEvent]:
        info = data.get("rate_limit_info")
        if not isinstance(info, dict):
            return []
        status = text(info.get("status"))
        window = text(info.get("rateLimitType"))
        resets = num(info.get("resetsAt"))
        if status == "rejected":
            if not window or resets is None:
                return []  # an ordinary transient 429: "not your usage limit"
            self.window_closed = WindowEvent(rejected=True, window=window, resets_at=resets)
            return [self.window_closed]
        utilization = num(info.get("utilization"))
        if status == "allowed_warning" and utilization is not None:
            return [WindowEvent(rejected=False, window=window or "unknown", resets_at=resets,
                                utilization=max(0.0, min(1.0, utilization)))]
        return []

    def _result(self, data: dict[str, object]) -> list[AgentEvent]:
        events: list[AgentEvent] = []
        cost = num(data.get("total_cost_usd"))
        if cost is not None and self.cli_priced:
            events.append(CostEvent(cost))
        usage = _usage(data)
        if usage is not None:
            events.append(usage)
        events.append(self._verdict(data))
        return events

    def _verdict(self, data: dict[str, object]) -> ResultEvent:
        if data.get("is_error") is False:
            return ResultEvent(ok=True)
        subtype = text(data.get("subtype"))
        errors = data.get("errors")
        listed = "; ".join(text(e) for e in errors if text(e)) if isinstance(errors, list) else ""
        message = text(data.get("result")) or listed
        if subtype == BUDGET_SUBTYPE:
            return ResultEvent(ok=False, error=message or "reached the budget",
                               budget_stopped=True)
        status = whole(data.get("api_error_status"))
        if self.window_closed is not None:
            return ResultEvent(ok=False, error=message or "usage limit reached",
                               error_kind=USAGE_LIMIT, api_status=status)
        interrupted = subtype == INTERRUPTED_SUBTYPE
        if not interrupted and (status is not None or self.error_hint or "API Error" in message):
            kind = classify_api_error(status, self.error_hint, message)
            return ResultEvent(ok=False, error=message or subtype, error_kind=kind,
                               api_status=status)
        reason = text(data.get("terminal_reason"))
        detail = f"{subtype} ({reason})" if subtype and reason else subtype or reason
        return ResultEvent(ok=False, error=message if data.get("result") else
                           detail or "the agent reported an error")


def _result_text(content: object) -> str:
    if isinstance(content, str):
        return text(content)
    if isinstance(content, list):
        return "\n".join(text(b.get("text")) for b in content
                         if isinstance(b, dict) and b.get("type") == "text")
    return ""


def _usage(data: dict[str, object]) -> UsageEvent | None:
    """Per-invocation token totals: the sum over ``modelUsage``, else ``usage``."""
    per_model = data.get("modelUsage")
    if isinstance(per_model, dict) and per_model:
        rows = [m for m in per_model.values() if isinstance(m, dict)]
        fresh = sum(whole(m.get("inputTokens")) or 0 for m in rows)
        read = sum(whole(m.get("cacheReadInputTokens")) or 0 for m in rows)
        wrote = sum(whole(m.get("cacheCreationInputTokens")) or 0 for m in rows)
        out = sum(whole(m.get("outputTokens")) or 0 for m in rows)
        return UsageEvent(fresh + read + wrote, read, out)
    usage = data.get("usage")
    if not isinstance(usage, dict):
        return None
    fresh = whole(usage.get("input_tokens")) or 0
    read = whole(usage.get("cache_read_input_tokens")) or 0
    wrote = whole(usage.get("cache_creation_input_tokens")) or 0
    return UsageEvent(fresh + read + wrote, read, whole(usage.get("output_tokens")) or 0)
