"""The real Claude Code and Codex CLIs, end to end (issue 3: "The real CLIs, end to end").

A real node runs two iterations of two steps with each pinned CLI, through the real fractal
CLI and supervisor in the session's private tmux server, against the loopback mock LLM.
Each step makes two model calls: a shell tool call (the step's ``[mock:bash=...]``
directive, which appends a line to ``hello.txt``) and a final text. Checked from the
outside: the step rows (session, cost, tokens), the requests the mock received (which
session each belongs to, and whether it carried the earlier steps' history), and the file
the agent wrote, committed on the node branch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.agents.conftest import CODEX_FLAGS, codex_config, start_env
from tests.agents.mock_llm import MockLLM
from tests.e2e.conftest import Tree
from tests.helpers import git

pytestmark = [pytest.mark.agents, pytest.mark.timeout(720)]  # a first install included

NODE_MD = ("# Task\n\nKeep a log in hello.txt. The mock model answers each step with one "
           "shell command taken from the step, then a short final message.\n")
STEPS = {
    "01-MAKE.md": 'Start the log. [mock:bash=echo "made $ITER_REF" >> hello.txt]\n',
    "02-CHECK.md": ('Extend the log. [mock:bash=echo "checked $ITER_REF" >> hello.txt] '
                    "[mock:say=Checked.]\n"),
}
# The mock's fixed usage per model call, and two calls per step (tool call, final text).
CALL_INPUT, CALL_OUTPUT, CALLS_PER_STEP = 1000, 100, 2
STEP_TOKENS = (CALLS_PER_STEP * CALL_INPUT, 0, CALLS_PER_STEP * CALL_OUTPUT)
# Claude Code prices claude-opus-4-8 at 5 USD/M input and 25 USD/M output tokens itself.
CLAUDE_STEP_USD = CALLS_PER_STEP * (CALL_INPUT * 5 + CALL_OUTPUT * 25) / 1_000_000  # 0.015


def _header(request: dict[str, Any], name: str) -> str | None:
    return next((v for k, v in request["headers"].items() if k.lower() == name.lower()), None)


def _carries(request: dict[str, Any], text: str) -> bool:
    """The request's conversation (messages or input) contains ``text``."""
    body = request["body"]
    return text in json.dumps(body.get("messages") or body.get("input") or [])


def _step_rows(tree: Tree, name: str) -> list[tuple[Any, ...]]:
    return tree.sql(
        "SELECT i.iter, s.step_name, s.status, s.exit_code, s.metadata, s.cost, s.model, "
        "s.input_tokens, s.cached_input_tokens, s.output_tokens, s.session FROM steps s "
        "JOIN iterations i ON i.iter_id = s.iter_id WHERE s.node = ? ORDER BY s.step_id",
        f"main.{name}")


def _check_run_and_file(tree: Tree, name: str) -> None:
    """The run completed both iterations; hello.txt, written only by the agent's tool calls,
    is committed on the node branch once per iteration."""
    (run_id, status, code, meta), = tree.sql(
        "SELECT run_id, status, exit_code, metadata FROM runs WHERE node = ?", f"main.{name}")
    assert (status, code, meta) == ("completed", 0, "Reached max iterations (2)")
    lines = [f"{verb} {run_id}.{it}" for it in (1, 2) for verb in ("made", "checked")]
    assert git(tree.repo, "show", f"main.{name}:hello.txt").splitlines() == lines
    commits = dict(line.split("\t", 1)[::-1] for line in git(
        tree.repo, "log", "--format=%H%x09%s", f"main.{name}").splitlines())
    first = commits[f"main.{name}: iteration {run_id}.1 (auto)"]
    assert git(tree.repo, "show", f"{first}:hello.txt").splitlines() == lines[:2]
    assert f"main.{name}: iteration {run_id}.2 (auto)" in commits


def _check_conversations(calls: list[dict[str, Any]], sessions: list[str]) -> None:
    """Two calls per step; each step's first call answered with the tool call, its second
    (after the tool result) with text. The second step's calls carry the first step's
    prompt (resumed); the next iteration's first call does not (fresh)."""
    assert len(calls) == 4 * CALLS_PER_STEP
    assert [c["answer"]["tool"] is not None for c in calls] == [True, False] * 4
    assert [_carries(c, "Start the log.") for c in calls] == [True] * 8
    assert [_carries(c, "Extend the log.") for c in calls] == [False, False, True, True] * 2
    assert len(set(sessions)) == 2 and sessions == [sessions[0]] * 4 + [sessions[4]] * 4


def test_claude_runs_two_iterations_resuming_within_each(
        real_tree: Tree, agent_bin: Path, mock_llm: MockLLM, tmp_path: Path) -> None:
    tree, home = real_tree, tmp_path / "home"
    tree.node("cl", STEPS, "--agent", "claude", "--model", "claude-opus-4-8", "--no-sync",
              "--max-iters", "2", node_md=NODE_MD)
    tree.cli("node", "start", "cl", env=start_env(home, agent_bin, mock_llm))
    assert tree.wait_settled("cl", timeout=120) == "completed"
    _check_run_and_file(tree, "cl")

    rows = _step_rows(tree, "cl")
    first, second = rows[0][-1], rows[2][-1]
    # total_cost_usd is per process: the resumed launch reports its own 0.015, not 0.03.
    expected = [(it, step, "completed", 0, "", CLAUDE_STEP_USD, "claude-opus-4-8",
                 *STEP_TOKENS, session)
                for it, session in ((1, first), (2, second)) for step in ("MAKE", "CHECK")]
    assert rows == expected and first != second
    assert tree.sql("SELECT session FROM iterations WHERE node = 'main.cl' ORDER BY iter") \
        == [(first,), (second,)]

    calls = mock_llm.posts("/v1/messages")
    assert {(r["method"], r["path"]) for r in mock_llm.requests} \
        == {("HEAD", "/"), ("POST", "/v1/messages?beta=true")}
    assert {c["body"]["model"] for c in calls} == {"claude-opus-4-8"}
    _check_conversations(calls, [str(_header(c, "X-Claude-Code-Session-Id")) for c in calls])
    assert _header(calls[0], "X-Claude-Code-Session-Id") == first
    # Claude Code kept both conversations in the isolated config dir.
    stored = {p.stem for p in (home / ".claude" / "projects").glob("*/*.jsonl")}
    assert {first, second} <= stored


def test_codex_runs_two_iterations_resuming_within_each(
        real_tree: Tree, agent_bin: Path, mock_llm: MockLLM, tmp_path: Path) -> None:
    tree = real_tree
    ndir = tree.node("cx", STEPS, "--agent", f"codex {CODEX_FLAGS}", "--model", "gpt-5.5",
                     "--no-sync", "--max-iters", "2", node_md=NODE_MD)
    (ndir / ".codex" / "config.toml").write_text(codex_config(mock_llm))
    tree.cli("node", "start", "cx", env=start_env(tmp_path / "home", agent_bin, mock_llm))
    assert tree.wait_settled("cx", timeout=120) == "completed"
    _check_run_and_file(tree, "cx")

    rows = _step_rows(tree, "cx")
    first, second = rows[0][-1], rows[2][-1]
    # Codex reports no dollars (cost stays unknown) and thread-cumulative usage (2000/200,
    # then 4000/400 on resume): each row holds that launch's own share.
    expected = [(it, step, "completed", 0, "", None, "gpt-5.5", *STEP_TOKENS, session)
                for it, session in ((1, first), (2, second)) for step in ("MAKE", "CHECK")]
    assert rows == expected and first != second

    calls = mock_llm.posts("/v1/responses")
    assert {(r["method"], r["path"]) for r in mock_llm.requests} == {("POST", "/v1/responses")}
    assert {c["body"]["model"] for c in calls} == {"gpt-5.5"}
    _check_conversations(calls, [str(_header(c, "session-id")) for c in calls])
    assert _header(calls[0], "session-id") == first
    assert (ndir / ".codex" / "sessions").is_dir()  # the node's own CODEX_HOME
