"""The mock LLM's own contract (spec/agent-clis.md, "The mock"), without any CLI: what it
decides for a conversation, and what it answers over HTTP. Runs without npm."""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.agents.mock_llm import MockLLM
from tests.agents.mock_wire import DEFAULT_COMMAND, DEFAULT_TEXT, Options, decide

pytestmark = pytest.mark.agents

USER = {"role": "user", "content": [{"type": "text", "text": "Do it. [mock:bash=touch a]"}]}
SYSTEM = {"role": "system", "content": "agent types ..."}
TOOL_USE = {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "Bash"}]}
RESULT = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]}
CONTEXT = {"type": "message", "role": "user",
           "content": [{"type": "input_text", "text": "<environment_context>x"}]}
PROMPT = {"type": "message", "role": "user",
          "content": [{"type": "input_text", "text": "Go [mock:say=Bye.]"}]}
CALL = {"type": "function_call", "name": "exec_command", "call_id": "c"}
OUTPUT = {"type": "function_call_output", "call_id": "c", "output": "ok"}


@pytest.mark.parametrize(("turns", "tools", "expected"), [
    ([USER, SYSTEM], ["Bash"], ("Bash", {"command": "touch a", "description": "mock tool call"},
                                "")),
    ([USER, SYSTEM, TOOL_USE, RESULT], ["Bash"], (None, None, DEFAULT_TEXT)),
    ([USER, TOOL_USE, RESULT, {"role": "assistant", "content": "done"},
      {"role": "user", "content": "again"}], ["Bash"],
     ("Bash", {"command": DEFAULT_COMMAND, "description": "mock tool call"}, "")),
    ([USER], [], (None, None, DEFAULT_TEXT)),
    ([CONTEXT, PROMPT], ["exec_command"], ("exec_command", {"cmd": DEFAULT_COMMAND}, "")),
    ([CONTEXT, PROMPT, CALL, OUTPUT], ["exec_command"], (None, None, "Bye.")),
    ([CONTEXT, PROMPT], ["shell"], ("shell", {"command": ["bash", "-lc", DEFAULT_COMMAND]},
                                    "")),
    ([{"role": "user", "content": "Hi [mock:text] [mock:say=Hello.]"}], ["Bash"],
     (None, None, "Hello.")),
], ids=["tool-first", "text-after-tool-result", "resumed-turn-uses-newest-prompt",
        "no-tools", "codex-skips-context", "codex-after-output", "shell-tool", "text-only"])
def test_decide(turns: list[Any], tools: list[str],
                expected: tuple[str | None, dict[str, Any] | None, str]) -> None:
    decision = decide(turns, tools, Options(), None)
    assert (decision.status, decision.tool, decision.arguments, decision.text) \
        == (200, *expected)


@pytest.fixture
def mock() -> Iterator[MockLLM]:
    server = MockLLM(Options(fail_status=529, fail_count=1)).start()
    try:
        yield server
    finally:
        server.stop()


def _post(mock: MockLLM, path: str, body: dict[str, Any]) -> tuple[int, dict[str, str], str]:
    conn = http.client.HTTPConnection("127.0.0.1", mock.port, timeout=10)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read().decode()
    finally:
        conn.close()


def _events(sse: str) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in sse.splitlines() if line.startswith("data: ")]


def test_http_answers_fail_first_then_stream_fixed_usage(mock: MockLLM) -> None:
    body = {"model": "m", "stream": True, "messages": [USER], "tools": [{"name": "Bash"}]}
    status, headers, text = _post(mock, "/v1/messages?beta=true", body)
    assert (status, headers["retry-after"]) == (529, "1")
    assert json.loads(text)["error"]["type"] == "overloaded_error"
    status, headers, text = _post(mock, "/v1/messages?beta=true", body)
    events = _events(text)
    assert (status, headers["Transfer-Encoding"]) == (200, "chunked")
    assert [e["type"] for e in events][:2] == ["message_start", "ping"]
    assert events[0]["message"]["usage"]["input_tokens"] == 1000
    assert events[-2]["delta"]["stop_reason"] == "tool_use"
    assert events[-2]["usage"] == {"output_tokens": 100}
    status, _, text = _post(mock, "/v1/responses", {"model": "m", "stream": True,
                                                    "input": [CONTEXT, PROMPT, CALL, OUTPUT]})
    done = _events(text)[-1]
    assert (status, done["type"]) == (200, "response.completed")
    assert done["response"]["output"][0]["content"][0]["text"] == "Bye."
    assert done["response"]["usage"]["total_tokens"] == 1100
    status, _, text = _post(mock, "/v1/messages/count_tokens", {"messages": [USER]})
    assert (status, json.loads(text)) == (200, {"input_tokens": 1000})
    assert [r["answer"]["status"] for r in mock.requests] == [529, 200, 200, 200]


def test_a_window_closed_at_the_first_call_drifts_once_then_opens(mock: MockLLM) -> None:
    mock.close_window_at_first_call(5.0, again=3.0)
    before = time.time()
    state, reset, window = mock.window_state()  # the first call starts the window
    assert (state, window) == ("rejected", "five_hour")
    assert before + 5.0 <= reset <= time.time() + 5.0
    assert mock.window_state()[:2] == ("rejected", reset)  # the same window until its reset
    mock.window_until = time.time() - 0.01  # as if its reset had passed
    before = time.time()
    state, reset, _ = mock.window_state()  # the probe after the reset: closed once more
    assert state == "rejected" and before + 3.0 <= reset <= time.time() + 3.0
    mock.window_until = time.time() - 0.01
    assert mock.window_state()[0] == "allowed"


def test_a_warning_states_a_reset_counted_from_the_warned_call(mock: MockLLM) -> None:
    mock.warn_window(0.96, resets_in=4.0)
    before = time.time()
    state, reset, _ = mock.window_state()
    assert state == "warning" and before + 4.0 <= reset <= time.time() + 4.0
    assert mock.window_state() == ("warning", reset, "five_hour")  # fixed at the first call
    assert mock.warn_reset == reset


def test_an_outage_from_now_changes_its_status_and_ends_on_the_clock() -> None:
    """The night's outage: 500 from the clock's now, then 529 for the second half, then
    answered again; never anchored at a later call."""
    mock = MockLLM().start()
    try:
        _outage_from_now(mock)
    finally:
        mock.stop()


def _outage_from_now(mock: MockLLM) -> None:
    mock.outage_now(500, 60.0)
    assert mock.forced_status() == 500
    mock.outage_now(529, 60.0)
    assert mock.forced_status() == 529
    mock.outage_until = time.time() - 0.01  # as if its end had passed
    assert mock.forced_status() is None
