"""The real pinned CLIs against the mock's usage windows, read by fractal's parsers: a
subscriber's Claude Code and Codex each stop at a used-up window and say when it
reopens; near the limit they report the window's use; a plain 429 stays transient.
This proves the mock answers the way the captured streams were produced."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from fractal.agents.base import AgentEvent, ResultEvent, WindowEvent
from fractal.agents.claude_stream import ClaudeParser
from fractal.agents.codex_stream import CodexParser
from fractal.domain.agent.errors import USAGE_LIMIT
from tests.agents.conftest import CODEX_FLAGS, codex_config, start_env
from tests.agents.mock_llm import MockLLM

pytestmark = [pytest.mark.agents, pytest.mark.timeout(720)]  # a first install included


def _claude(agent_bin: Path, mock: MockLLM, home: Path, prompt: str) -> list[AgentEvent]:
    env = start_env(home, agent_bin, mock, CLAUDE_CODE_OAUTH_TOKEN="dummy")
    env.pop("ANTHROPIC_API_KEY", None)  # a subscriber: the unified headers are read
    done = subprocess.run([str(agent_bin / "claude"), "-p", "--output-format", "stream-json",
                           "--verbose", prompt], env=env, cwd=home, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL, check=False)
    parser = ClaudeParser()
    events: list[AgentEvent] = []
    for line in done.stdout.splitlines():
        events += parser.feed(line)
    return events + parser.finish()


def _verdict(events: list[AgentEvent]) -> ResultEvent:
    results = [e for e in events if isinstance(e, ResultEvent)]
    assert results, events
    return results[-1]


def test_claude_subscriber_stops_at_a_used_up_window(
        agent_bin: Path, mock_llm: MockLLM, tmp_path: Path) -> None:
    until = time.time() + 3600
    mock_llm.close_window(until, "five_hour")
    events = _claude(agent_bin, mock_llm, tmp_path / "home", "Say hi. [mock:text]")
    closed = [e for e in events if isinstance(e, WindowEvent) and e.rejected]
    assert closed and closed[0].window == "five_hour"
    assert closed[0].resets_at == float(int(until))
    assert _verdict(events).error_kind == USAGE_LIMIT
    assert mock_llm.usage_answers() == ["rejected"]  # one call: the CLI does not retry


def test_claude_reports_a_window_near_its_limit(
        agent_bin: Path, mock_llm: MockLLM, tmp_path: Path) -> None:
    mock_llm.warn_window(0.96)
    events = _claude(agent_bin, mock_llm, tmp_path / "home", "Say hi. [mock:text]")
    warned = [e for e in events if isinstance(e, WindowEvent) and not e.rejected]
    assert warned and warned[0].utilization == pytest.approx(0.96)
    assert _verdict(events).ok


def test_codex_stops_at_a_used_up_window_and_its_rollout_says_so(
        agent_bin: Path, mock_llm: MockLLM, tmp_path: Path) -> None:
    mock_llm.close_window(time.time() + 3600)
    home = tmp_path / "home"
    home.mkdir()
    codex_home = home / ".codex"
    codex_home.mkdir()
    (codex_home / "config.toml").write_text(codex_config(mock_llm, request_max_retries=0,
                                                         stream_max_retries=0))
    env = start_env(home, agent_bin, mock_llm, CODEX_HOME=str(codex_home))
    started = time.time()
    done = subprocess.run([str(agent_bin / "codex"), "exec", *CODEX_FLAGS.split(), "--json",
                           "-C", str(home), "-m", "gpt-5.5", "--", "Say hi. [mock:text]"],
                          env=env, cwd=home, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL, check=False)
    parser = CodexParser(sessions=codex_home / "sessions", since=started - 1)
    events: list[AgentEvent] = []
    for line in done.stdout.splitlines():
        events += parser.feed(line)
    events += parser.finish()
    assert any(isinstance(e, WindowEvent) and e.rejected for e in events), done.stdout
    assert _verdict(events).error_kind == USAGE_LIMIT
    assert mock_llm.usage_answers() == ["rejected"]
