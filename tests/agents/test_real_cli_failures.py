"""How the loop records the real CLIs' failures (issue 3: Failure modes), where the captured
streams alone cannot show it: an API error after the CLI's own retries, classified from
what the real CLI prints, and a time limit hit while Claude Code's Bash tool runs (the soft
interrupt keeps the cost; no tool process survives).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.agents.conftest import CODEX_FLAGS, codex_config, start_env
from tests.agents.mock_llm import MockLLM
from tests.e2e.conftest import Tree
from tests.helpers import SCALE, wait_until

pytestmark = [pytest.mark.agents, pytest.mark.timeout(720)]  # a first install included

ONE_ITER = ("--no-sync", "--max-iters", "1", "--step-retries", "0")


def _rows(tree: Tree, name: str) -> list[tuple[Any, ...]]:
    return tree.sql("SELECT step_name, status, exit_code, metadata, cost, input_tokens, "
                    "output_tokens FROM steps WHERE node = ? ORDER BY step_id", f"main.{name}")


def test_api_errors_fail_the_step_with_their_class(
        real_tree: Tree, agent_bin: Path, mock_llm: MockLLM, tmp_path: Path) -> None:
    tree = real_tree
    tree.node("cl429", {"01-ASK.md": "Ask. [mock:status=429]\n"}, "--agent", "claude",
              *ONE_ITER)
    ndir = tree.node("cx401", {"01-ASK.md": "Ask. [mock:status=401]\n"},
                     "--agent", f"codex {CODEX_FLAGS}", "--model", "gpt-5.5", *ONE_ITER)
    (ndir / ".codex" / "config.toml").write_text(
        codex_config(mock_llm, request_max_retries=0, stream_max_retries=1))
    env = start_env(tmp_path / "home", agent_bin, mock_llm, CLAUDE_CODE_MAX_RETRIES="1")
    for name in ("cl429", "cx401"):
        tree.cli("node", "start", name, env=env)
    # A 429 that is not a usage window is a provider outage: waited out, not a failed run.
    wait_until(lambda: tree.cli("node", "status", "cl429").stdout.startswith(
        "active (waiting out a provider outage (HTTP 429, attempt 1) until "), timeout=120,
        message="cl429 waiting out the outage")
    tree.cli("node", "stop", "cl429")
    assert tree.wait_settled("cl429", timeout=120) == "stopped"
    assert tree.wait_settled("cx401", timeout=120) == "exited"

    (name, status, code, meta, cost, tokens_in, tokens_out), = _rows(tree, "cl429")
    assert (name, status, code) == ("ASK", "failed", 1)
    assert meta.startswith("agent error: rate_limit (HTTP 429): API Error: Request rejected "
                           "(429)"), meta
    assert (cost, tokens_in, tokens_out) == (0.0, 0, 0)  # the CLI's own figure: nothing spent
    assert len(mock_llm.posts("/v1/messages")) == 2  # one call, one retry by the CLI itself

    (name, status, code, meta, cost, tokens_in, tokens_out), = _rows(tree, "cx401")
    assert (name, status, code) == ("ASK", "failed", 1)
    assert meta.startswith("agent error: auth (HTTP 401): unexpected status 401"), meta
    assert (cost, tokens_in, tokens_out) == (None, None, None)
    assert len(mock_llm.posts("/v1/responses")) == 2  # stream_max_retries=1


def test_claude_at_its_time_limit_keeps_its_cost_and_leaves_no_tool_running(
        real_tree: Tree, agent_bin: Path, mock_llm: MockLLM, tmp_path: Path) -> None:
    tree = real_tree
    # Long enough for the CLI to start and make its first call on a loaded machine.
    limit = f"{round(6 * SCALE)}s"
    tree.node("slow", {"01-WAIT.md": "Wait. [mock:bash=sleep 347]\n"}, "--agent", "claude",
              "--model", "claude-opus-4-8", "--step-timeout", limit, *ONE_ITER)
    tree.cli("node", "start", "slow", env=start_env(tmp_path / "home", agent_bin, mock_llm))
    assert tree.wait_settled("slow", timeout=120) == "exited"
    # SIGINT first: Claude Code prints its final result (one call: 0.0075 USD) and ends the
    # Bash tool it had started in a session of its own; the sweep would catch it otherwise.
    (name, status, code, meta, cost, tokens_in, tokens_out), = _rows(tree, "slow")
    assert (name, status, code, meta) == ("WAIT", "exited", 124, "timed out")
    assert (cost, tokens_in, tokens_out) == (0.0075, 1000, 100)
    (call,) = mock_llm.posts("/v1/messages")
    assert call["answer"]["arguments"]["command"] == "sleep 347"
    assert not [p.pid for p in psutil.process_iter(["cmdline"])
                if "sleep 347" in " ".join(p.info["cmdline"] or [])]
