"""What the loopback mock LLM answers, independent of HTTP: reading a request into a
decision, and writing that decision as Anthropic Messages or OpenAI Responses payloads.

The shapes follow spec/agent-clis.md ("The mock"): the event sequences Claude Code 2.1.197
and Codex 0.171.0 parse, fixed token usage per call, error bodies per API. Everything here
is a pure function of the request body and the options, so retries and resumes just work.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

DEFAULT_COMMAND = "echo 'hello from mock' > hello.txt && ls -la"
DEFAULT_TEXT = "Done: I created hello.txt."
_DIRECTIVE = re.compile(r"\[mock:([a-z]+)(?:=([^\]]*))?\]")
_CONTEXT_TAG = re.compile(r"^\s*<(environment_context|user_instructions|system-reminder)>")

Event = tuple[str, dict[str, Any]]
"""One SSE event: (event name, data object)."""


@dataclass(frozen=True)
class Options:
    """Fixed answers of the mock: tokens per call (input, output), the final text, the
    tool command, and an HTTP status forced on the first ``fail_count`` model calls."""

    input_tokens: int = 1000
    output_tokens: int = 100
    text: str = DEFAULT_TEXT
    command: str = DEFAULT_COMMAND
    fail_status: int | None = None
    fail_count: int = 0
    stall: float = 0.0


@dataclass(frozen=True)
class Decision:
    """What one model call gets: an HTTP ``status`` (non-200 = an error body), a tool call
    (``tool`` name, ``arguments`` object) or else the final ``text``; ``stall`` seconds of
    silence after the stream head."""

    status: int = 200
    tool: str | None = None
    arguments: dict[str, Any] | None = None
    text: str = ""
    stall: float = 0.0


def _texts(content: Any) -> list[str]:
    """Text blocks of a message's ``content`` (a string or a list of blocks)."""
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    return [str(b.get("text", "")) for b in content
            if isinstance(b, dict) and b.get("type") in ("text", "input_text")]


def _is_tool_result(item: dict[str, Any]) -> bool:
    kind = str(item.get("type") or "")
    if kind.endswith("_call_output"):  # function_call_output, custom_tool_call_output, ...
        return True
    content = item.get("content")
    return isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content)


def read_turns(turns: list[Any]) -> tuple[bool, str]:
    """(the last user/assistant turn is a tool result, text of the newest user prompt).

    ``system`` and ``developer`` entries are skipped (Claude Code sends a mid-conversation
    ``role: system`` message); a user message that only carries context (Codex's
    ``<environment_context>``) is not a prompt.
    """
    convo = [t for t in turns if isinstance(t, dict) and t.get("role") not in ("system",
                                                                                "developer")
             and t.get("type") not in ("reasoning",)]
    after_tool = bool(convo) and _is_tool_result(convo[-1])
    prompt = ""
    for turn in reversed(convo):
        if turn.get("role") != "user" or _is_tool_result(turn):
            continue
        texts = [t for t in _texts(turn.get("content")) if not _CONTEXT_TAG.match(t)]
        if texts:
            prompt = "\n".join(texts)
            break
    return after_tool, prompt


def decide(turns: list[Any], tool_names: list[str], options: Options,
           forced_status: int | None) -> Decision:
    """The answer to one model call (spec/agent-clis.md: tool call first, then final text).

    Prompt directives: ``[mock:text]``, ``[mock:say=TEXT]``, ``[mock:bash=CMD]``,
    ``[mock:status=N]``, ``[mock:stall=N]``. ``forced_status`` (from ``--fail-status``)
    wins over everything.
    """
    after_tool, prompt = read_turns(turns)
    found = {name: value or "" for name, value in _DIRECTIVE.findall(prompt)}
    stall = float(found["stall"]) if "stall" in found else options.stall
    if forced_status is not None:
        return Decision(status=forced_status)
    if "status" in found:
        return Decision(status=int(found["status"]))
    text = found.get("say") or options.text
    tool = next((n for n in ("Bash", "exec_command", "shell_command", "shell")
                 if n in tool_names), None)
    if after_tool or "text" in found or tool is None:
        return Decision(text=text, stall=stall)
    command = found.get("bash") or options.command
    shapes: dict[str, dict[str, Any]] = {
        "Bash": {"command": command, "description": "mock tool call"},
        "exec_command": {"cmd": command},
        "shell_command": {"command": command},
        "shell": {"command": ["bash", "-lc", command]},
    }
    return Decision(tool=tool, arguments=shapes[tool], stall=stall)


def _mock_id(prefix: str) -> str:
    return f"{prefix}_mock_{uuid.uuid4().hex[:16]}"


# -- Anthropic Messages ----------------------------------------------------------------

def anthropic_blocks(decision: Decision) -> list[dict[str, Any]]:
    """The content blocks of an answer: a short text then a ``tool_use``, or the text."""
    if decision.tool is None:
        return [{"type": "text", "text": decision.text}]
    return [{"type": "text", "text": "I'll run a command."},
            {"type": "tool_use", "id": _mock_id("toolu"), "name": decision.tool,
             "input": decision.arguments or {}}]


def anthropic_usage(options: Options, output_tokens: int) -> dict[str, int]:
    return {"input_tokens": options.input_tokens, "output_tokens": output_tokens,
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}


def anthropic_events(decision: Decision, model: str, options: Options) -> list[Event]:
    """The SSE sequence: message_start, ping, each block's start/delta/stop, message_delta
    (stop reason, output tokens), message_stop."""
    head: dict[str, Any] = {"id": _mock_id("msg"), "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": anthropic_usage(options, 1)}
    events: list[Event] = [("message_start", {"type": "message_start", "message": head}),
                           ("ping", {"type": "ping"})]
    for index, block in enumerate(anthropic_blocks(decision)):
        start: dict[str, Any]
        delta: dict[str, Any]
        if block["type"] == "text":
            start = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            start = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events += [("content_block_start", {"type": "content_block_start", "index": index,
                                            "content_block": start}),
                   ("content_block_delta", {"type": "content_block_delta", "index": index,
                                            "delta": delta}),
                   ("content_block_stop", {"type": "content_block_stop", "index": index})]
    stop = "end_turn" if decision.tool is None else "tool_use"
    events += [("message_delta", {"type": "message_delta",
                                  "delta": {"stop_reason": stop, "stop_sequence": None},
                                  "usage": {"output_tokens": options.output_tokens}}),
               ("message_stop", {"type": "message_stop"})]
    return events


def anthropic_message(decision: Decision, model: str, options: Options) -> dict[str, Any]:
    """The non-streaming answer (``stream: false``)."""
    return {"id": _mock_id("msg"), "type": "message", "role": "assistant", "model": model,
            "content": anthropic_blocks(decision),
            "stop_reason": "end_turn" if decision.tool is None else "tool_use",
            "stop_sequence": None, "usage": anthropic_usage(options, options.output_tokens)}


_ANTHROPIC_ERRORS = {400: "invalid_request_error", 401: "authentication_error",
                     403: "permission_error", 404: "not_found_error",
                     413: "request_too_large", 429: "rate_limit_error",
                     529: "overloaded_error"}


def anthropic_error(status: int) -> dict[str, Any]:
    kind = _ANTHROPIC_ERRORS.get(status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": f"mock: scripted HTTP {status}"}}


# -- OpenAI Responses ------------------------------------------------------------------

def responses_item(decision: Decision) -> dict[str, Any]:
    """The one output item: a ``function_call`` or an assistant ``message``."""
    if decision.tool is not None:
        return {"type": "function_call", "id": _mock_id("fc"), "call_id": _mock_id("call"),
                "name": decision.tool, "arguments": json.dumps(decision.arguments or {})}
    return {"type": "message", "id": _mock_id("msg"), "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": decision.text, "annotations": []}]}


def responses_events(decision: Decision, model: str, options: Options) -> list[Event]:
    """The SSE sequence: created, in_progress, output_item.added, the item's deltas,
    output_item.done, completed (with the fixed usage)."""
    rid = _mock_id("resp")
    base = {"id": rid, "object": "response", "model": model, "status": "in_progress",
            "output": []}
    item = responses_item(decision)
    events: list[Event] = [
        ("response.created", {"type": "response.created", "response": base}),
        ("response.in_progress", {"type": "response.in_progress", "response": base}),
        ("response.output_item.added", {"type": "response.output_item.added",
                                        "output_index": 0,
                                        "item": {**item, "arguments": ""} if decision.tool
                                        else {**item, "content": []}})]
    ref = {"item_id": item["id"], "output_index": 0}
    if decision.tool is not None:
        events += [("response.function_call_arguments.delta",
                    {"type": "response.function_call_arguments.delta", **ref,
                     "delta": item["arguments"]}),
                   ("response.function_call_arguments.done",
                    {"type": "response.function_call_arguments.done", **ref,
                     "arguments": item["arguments"]})]
    else:
        part = {"type": "output_text", "text": "", "annotations": []}
        events += [("response.content_part.added", {"type": "response.content_part.added",
                                                    **ref, "content_index": 0, "part": part}),
                   ("response.output_text.delta", {"type": "response.output_text.delta", **ref,
                                                   "content_index": 0,
                                                   "delta": decision.text}),
                   ("response.output_text.done", {"type": "response.output_text.done", **ref,
                                                  "content_index": 0, "text": decision.text}),
                   ("response.content_part.done", {"type": "response.content_part.done", **ref,
                                                   "content_index": 0,
                                                   "part": {**part, "text": decision.text}})]
    usage = {"input_tokens": options.input_tokens,
             "input_tokens_details": {"cached_tokens": 0},
             "output_tokens": options.output_tokens,
             "output_tokens_details": {"reasoning_tokens": 0},
             "total_tokens": options.input_tokens + options.output_tokens}
    events += [("response.output_item.done", {"type": "response.output_item.done",
                                              "output_index": 0, "item": item}),
               ("response.completed", {"type": "response.completed",
                                       "response": {**base, "status": "completed",
                                                    "output": [item], "usage": usage}})]
    return events


_OPENAI_ERRORS = {400: ("invalid_request_error", "invalid_request"),
                  401: ("invalid_request_error", "invalid_api_key"),
                  429: ("rate_limit_error", "rate_limit_exceeded")}


def openai_error(status: int) -> dict[str, Any]:
    kind, code = _OPENAI_ERRORS.get(status, ("server_error", "server_error"))
    return {"error": {"type": kind, "code": code, "message": f"mock: scripted HTTP {status}"}}
