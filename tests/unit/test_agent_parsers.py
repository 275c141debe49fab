"""The claude and codex stream parsers over every captured stream of the real CLIs
(tests/fixtures/streams, from spec/agent-clis.md): session, cost, served model, token
usage, the final verdict and its failure class, API retries and tools."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from fractal.agents.base import (
    AgentEvent,
    CostEvent,
    ModelEvent,
    NoticeEvent,
    ResultEvent,
    SessionEvent,
    StreamParser,
    TextEvent,
    ToolEvent,
    Usage,
    UsageEvent,
)
from fractal.agents.claude_stream import ClaudeParser
from fractal.agents.codex_stream import CodexParser, usage_delta

STREAMS = Path(__file__).resolve().parent.parent / "fixtures" / "streams"
CLAUDE_SESSION = "f50caac2-bd4a-49b4-b15a-919df64b9a21"
CODEX_THREAD = "01a22e11-414c-74a3-b2af-1ab8e6bf603d"
OPUS = "claude-opus-4-8"


@dataclass(frozen=True)
class Seen:
    """What a parser made of one whole stream."""

    session: str | None = None
    cost: float | None = None
    model: str | None = None
    usage: Usage | None = None
    ok: bool | None = None  # None: no final event
    kind: str | None = None
    status: int | None = None
    budget: bool = False
    retries: int = 0
    tools: tuple[str, ...] = ()


def replay(parser: StreamParser, name: str) -> tuple[Seen, list[AgentEvent]]:
    events: list[AgentEvent] = []
    for line in (STREAMS / f"{name}.jsonl").read_text(encoding="utf-8").splitlines():
        events += parser.feed(line)
    events += parser.finish()
    sessions = [e.session for e in events if isinstance(e, SessionEvent)]
    costs = [e.usd for e in events if isinstance(e, CostEvent)]
    models = [e.model for e in events if isinstance(e, ModelEvent)]
    usages = [(e.input_tokens, e.cached_input_tokens, e.output_tokens)
              for e in events if isinstance(e, UsageEvent)]
    results = [e for e in events if isinstance(e, ResultEvent)]
    assert len(results) <= 1
    result = results[0] if results else None
    return Seen(
        session=sessions[0] if sessions else None,
        cost=costs[-1] if costs else None,
        model=models[-1] if models else None,
        usage=usages[-1] if usages else None,
        ok=None if result is None else result.ok,
        kind=None if result is None else result.error_kind,
        status=None if result is None else result.api_status,
        budget=bool(result and result.budget_stopped),
        retries=sum(1 for e in events if isinstance(e, NoticeEvent) and e.retry),
        tools=tuple(e.name for e in events if isinstance(e, ToolEvent)),
    ), events


def _session(name: str) -> str:
    import json

    first = (STREAMS / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()[0]
    value = json.loads(first).get("session_id") or json.loads(first).get("thread_id")
    assert isinstance(value, str)
    return value


CLAUDE = [
    ("claude-tool-success", Seen(cost=0.015, model=OPUS, usage=(2000, 0, 200), ok=True,
                                 tools=("Bash",))),
    ("claude-resume", Seen(cost=0.015, model=OPUS, usage=(2000, 0, 200), ok=True,
                           tools=("Bash",))),
    ("claude-text-only", Seen(cost=0.0075, model=OPUS, usage=(1000, 0, 100), ok=True)),
    ("claude-output-json", Seen(cost=0.0075, usage=(1000, 0, 100), ok=True)),
    ("claude-partial-messages", Seen(cost=0.0075, model=OPUS, usage=(1000, 0, 100), ok=True)),
    # usage is zeroed on a budget stop; modelUsage carries the real figures
    ("claude-max-budget", Seen(cost=0.0075, model=OPUS, usage=(1000, 0, 100), ok=False,
                               budget=True, tools=("Bash",))),
    ("claude-http500", Seen(cost=0.0, usage=(0, 0, 0), ok=False, kind="server_error",
                            status=500, retries=2)),
    ("claude-http429", Seen(cost=0.0, usage=(0, 0, 0), ok=False, kind="rate_limit",
                            status=429, retries=2)),
    ("claude-http529", Seen(cost=0.0, usage=(0, 0, 0), ok=False, kind="overloaded",
                            status=529, retries=2)),
    ("claude-http401", Seen(cost=0.0, usage=(0, 0, 0), ok=False, kind="auth", status=401,
                            retries=2)),
    ("claude-http400", Seen(cost=0.0, usage=(0, 0, 0), ok=False, kind="bad_request",
                            status=400)),
    ("claude-retry-then-success", Seen(cost=0.0075, model=OPUS, usage=(1000, 0, 100), ok=True,
                                       retries=1)),
    ("claude-sigterm-midstream", Seen()),
    ("claude-sigterm-tool", Seen(model=OPUS, tools=("Bash",))),
    # SIGINT: a final result with the cost so far; an interruption, not an API error
    ("claude-sigint-tool", Seen(cost=0.0075, model=OPUS, usage=(1000, 0, 100), ok=False,
                                tools=("Bash",))),
    ("claude-sigint-midstream", Seen(cost=0.0, usage=(0, 0, 0), ok=False)),
]

CODEX = [
    ("codex-tool-success", Seen(usage=(2000, 0, 200), ok=True, tools=("exec",))),
    ("codex-resume", Seen(usage=(4000, 0, 400), ok=True, tools=("exec",))),
    ("codex-text-only", Seen(usage=(1000, 0, 100), ok=True)),
    ("codex-unknown-model", Seen(usage=(1000, 0, 100), ok=True)),
    ("codex-not-git-repo", Seen(usage=(1000, 0, 100), ok=True)),
    ("codex-retry-then-success", Seen(usage=(1000, 0, 100), ok=True)),  # silent retries
    ("codex-http400", Seen(ok=False, kind="bad_request")),
    ("codex-http401", Seen(ok=False, kind="auth", status=401, retries=1)),
    ("codex-http429", Seen(ok=False, kind="rate_limit", status=429, retries=1)),
    ("codex-http500", Seen(ok=False, kind="overloaded", retries=1)),
    ("codex-http500-default-retries", Seen(ok=False, kind="overloaded", retries=5)),
    ("codex-sigterm-midstream", Seen()),
    ("codex-sigterm-tool", Seen(tools=("exec",))),
    ("codex-sigint-tool", Seen(tools=("exec",))),  # SIGINT gives codex no final event
]


def test_every_fixture_is_in_a_table() -> None:
    names = {p.name.removesuffix(".jsonl") for p in STREAMS.glob("*.jsonl")}
    assert names == {n for n, _ in CLAUDE} | {n for n, _ in CODEX}


@pytest.mark.parametrize(("name", "expected"), CLAUDE, ids=[n for n, _ in CLAUDE])
def test_claude_stream(name: str, expected: Seen) -> None:
    seen, _ = replay(ClaudeParser(), name)
    assert seen == Seen(**{**expected.__dict__, "session": _session(name)
                           if name != "claude-output-json" else seen.session})
    assert seen.session


@pytest.mark.parametrize(("name", "expected"), CODEX, ids=[n for n, _ in CODEX])
def test_codex_stream(name: str, expected: Seen) -> None:
    seen, events = replay(CodexParser(), name)
    assert seen == Seen(**{**expected.__dict__, "session": _session(name)})
    assert not any(isinstance(e, CostEvent) for e in events)  # codex reports no dollars


def test_claude_output_json_session_comes_from_the_result_line() -> None:
    seen, _ = replay(ClaudeParser(), "claude-output-json")
    assert seen.session == "2b40db2b-5490-434b-8a7b-a7ce0e8473f2"


@pytest.mark.parametrize(("name", "message"), [
    ("claude-http429", "API Error: Request rejected (429) · mock: scripted HTTP 429"),
    ("claude-http401", "Failed to authenticate. API Error: 401 mock: scripted HTTP 401"),
    ("claude-max-budget", "Reached maximum budget ($0.005)"),
    ("claude-sigint-tool", "error_during_execution (aborted_tools)"),
    ("claude-sigint-midstream", "error_during_execution (aborted_streaming)"),
    ("codex-http429", "exceeded retry limit, last status: 429 Too Many Requests"),
    ("codex-http400", "invalid_request_error: mock: scripted HTTP 400"),
], ids=lambda v: v if v.startswith(("claude", "codex")) else "")
def test_final_error_message(name: str, message: str) -> None:
    parser: StreamParser = ClaudeParser() if name.startswith("claude") else CodexParser()
    _, events = replay(parser, name)
    result, = (e for e in events if isinstance(e, ResultEvent))
    assert result.error == message


def test_claude_cost_replaces_and_a_resumed_process_reports_its_own() -> None:
    # total_cost_usd is per process: the resumed run's 0.015 is not 0.015 + 0.015.
    first, _ = replay(ClaudeParser(), "claude-tool-success")
    second, _ = replay(ClaudeParser(), "claude-resume")
    assert (first.cost, second.cost) == (0.015, 0.015)


def test_claude_on_a_provider_route_reports_tokens_but_no_cli_cost() -> None:
    seen, events = replay(ClaudeParser(cli_priced=False), "claude-tool-success")
    assert seen.cost is None and seen.usage == (2000, 0, 200) and seen.ok is True
    assert not any(isinstance(e, CostEvent) for e in events)


def test_claude_synthetic_model_is_never_the_served_model() -> None:
    _, events = replay(ClaudeParser(), "claude-http500")
    assert not [e for e in events if isinstance(e, ModelEvent)]


def test_claude_pane_sees_text_tools_tool_output_and_retries() -> None:
    _, events = replay(ClaudeParser(), "claude-tool-success")
    texts = [e.text for e in events if isinstance(e, TextEvent)]
    assert "I'll run a command." in texts and "Done: I created hello.txt." in texts
    assert "    total 16" in texts and "    … (1 more lines)" in texts  # tool output preview
    tool, = (e for e in events if isinstance(e, ToolEvent))
    assert tool.detail == "echo 'hello from mock' > hello.txt && ls -la"
    _, events = replay(ClaudeParser(), "claude-http429")
    retries = [e.text for e in events if isinstance(e, NoticeEvent) and e.retry]
    assert retries[0] == "API retry 1/2: rate_limit (HTTP 429), next try in 1.0s"


def test_codex_resume_records_this_invocations_delta() -> None:
    # codex-resume continues codex-tool-success's thread: usage is cumulative over it.
    first, _ = replay(CodexParser(), "codex-tool-success")
    assert first.usage == (2000, 0, 200)
    second, _ = replay(CodexParser(prior=first.usage), "codex-resume")
    assert second.usage == (2000, 0, 200)
    assert second.session == first.session == CODEX_THREAD


def test_codex_error_item_is_a_warning_and_error_lines_are_notices() -> None:
    _, events = replay(CodexParser(), "codex-unknown-model")
    notices = [e.text for e in events if isinstance(e, NoticeEvent)]
    assert notices and notices[0].startswith("warning: Model metadata for `my-unknown-model`")
    result, = (e for e in events if isinstance(e, ResultEvent))
    assert result.ok
    _, events = replay(CodexParser(), "codex-http500-default-retries")
    notices = [e for e in events if isinstance(e, NoticeEvent)]
    assert len(notices) == 6 and [e.retry for e in notices] == [True] * 5 + [False]


@pytest.mark.parametrize(("cumulative", "prior", "delta"), [
    ((1000, 0, 100), None, (1000, 0, 100)),
    ((2000, 10, 200), (1000, 5, 100), (1000, 5, 100)),
    ((3000, 0, 300), (3000, 0, 300), (0, 0, 0)),
    ((500, 0, 50), (1000, 0, 100), (500, 0, 50)),  # not the thread prior describes
])
def test_usage_delta(cumulative: Usage, prior: Usage | None, delta: Usage) -> None:
    assert usage_delta(cumulative, prior) == delta


@pytest.mark.parametrize("line", [
    "", "not json", "{broken", "[1, 2]", '{"type": "assistant", "message": 3}',
    '{"type": "result"}', '{"type": "user", "message": {"content": "plain"}}',
    '{"type": "assistant", "message": {"content": [{"type": "tool_use", "input": 5}]}}',
    '{"type": "system", "subtype": "api_retry", "attempt": "x"}',
    '{"type": "item.completed", "item": {"type": "command_execution", "exit_code": -1}}',
    '{"type": "turn.completed", "usage": {"input_tokens": -5, "output_tokens": 1.5}}',
    '{"type": "turn.failed", "error": "flat"}', '{"session_id": "\\ud800x"}',
])
@pytest.mark.parametrize("make", [ClaudeParser, CodexParser], ids=["claude", "codex"])
def test_odd_lines_never_raise(line: str, make: type[ClaudeParser] | type[CodexParser]) -> None:
    events = make().feed(line)
    for event in events:
        for value in event._asdict().values():
            if isinstance(value, str):
                value.encode("utf-8")  # no lone surrogates reach the pane or the database
