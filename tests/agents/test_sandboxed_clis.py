"""The real Claude Code and Codex CLIs run sandboxed in their node's own agent homes
(issue 29): each step runs, the next step of the same iteration resumes its session, and
the cost is reported, with the tree's ``sandbox`` on. Claude Code keeps its sessions in
the node's Claude home (``<node_dir>/.claude/home``, bound over the user's config dir
inside the sandbox), never in the user's; the user's ``.claude.json`` is read (a fresh
copy per launch) and never written; Codex keeps its sessions in the node's
``CODEX_HOME``, and the user's Codex home is left as it was."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.agents.conftest import CODEX_FLAGS, codex_config, start_env
from tests.agents.mock_llm import MockLLM
from tests.agents.test_real_clis import (
    CLAUDE_STEP_USD,
    NODE_MD,
    STEP_TOKENS,
    STEPS,
    _check_conversations,
    _check_run_and_file,
    _header,
    _step_rows,
)
from tests.e2e.conftest import Tree
from tests.trees import set_sandbox

pytestmark = [pytest.mark.agents, pytest.mark.timeout(720)]

USER_JSON = '{"hasCompletedOnboarding": true, "userID": "operator"}\n'


def _files(top: Path) -> dict[str, bytes]:
    return {str(p.relative_to(top)): p.read_bytes() for p in sorted(top.rglob("*"))
            if p.is_file()}


def test_claude_runs_sandboxed_in_the_nodes_own_home(
        real_tree: Tree, agent_bin: Path, mock_llm: MockLLM, tmp_path: Path) -> None:
    tree, home = real_tree, tmp_path / "home"
    set_sandbox(tree.repo, "on")
    config = home / ".claude"  # the user's CLAUDE_CONFIG_DIR (start_env)
    config.mkdir(parents=True)
    (config / ".claude.json").write_text(USER_JSON)
    (config / ".credentials.json").write_text("{}\n")  # a login file, bound in writable
    (config / "settings.json").write_text("{}\n")  # else made so, to pin them read-only
    (config / "CLAUDE.md").write_text("")
    before = _files(config)
    ndir = tree.node("cl", STEPS, "--agent", "claude", "--model", "claude-opus-4-8",
                     "--no-sync", "--max-iters", "2", node_md=NODE_MD)
    tree.cli("node", "start", "cl", env=start_env(home, agent_bin, mock_llm))
    assert tree.wait_settled("cl", timeout=120) == "completed"
    _check_run_and_file(tree, "cl")

    rows = _step_rows(tree, "cl")
    first, second = rows[0][-1], rows[2][-1]
    expected = [(it, step, "completed", 0, "", CLAUDE_STEP_USD, "claude-opus-4-8",
                 *STEP_TOKENS, session)
                for it, session in ((1, first), (2, second)) for step in ("MAKE", "CHECK")]
    assert rows == expected and first != second
    calls = mock_llm.posts("/v1/messages")
    _check_conversations(calls, [str(_header(c, "X-Claude-Code-Session-Id")) for c in calls])
    # The conversations are the node's: kept in its own Claude home, none in the user's.
    stored = {p.stem for p in (ndir / ".claude" / "home" / "projects").glob("*/*.jsonl")}
    assert {first, second} <= stored
    assert _files(config) == before  # the user's config dir, .claude.json included
    assert (ndir / ".claude" / "home" / ".claude.json").is_file()  # the node's copy


def test_codex_runs_sandboxed_in_the_nodes_own_home(
        real_tree: Tree, agent_bin: Path, mock_llm: MockLLM, tmp_path: Path) -> None:
    tree, home = real_tree, tmp_path / "home"
    set_sandbox(tree.repo, "on")
    user_codex = home / ".codex"
    user_codex.mkdir(parents=True)
    (user_codex / "auth.json").write_text('{"OPENAI_API_KEY": null}\n')
    (user_codex / "config.toml").write_text("")  # else made so, to pin them read-only
    (user_codex / "AGENTS.md").write_text("")
    before = _files(user_codex)
    ndir = tree.node("cx", STEPS, "--agent", f"codex {CODEX_FLAGS}", "--model", "gpt-5.5",
                     "--no-sync", "--max-iters", "2", node_md=NODE_MD)
    (ndir / ".codex" / "config.toml").write_text(codex_config(mock_llm))
    tree.cli("node", "start", "cx", env=start_env(home, agent_bin, mock_llm))
    assert tree.wait_settled("cx", timeout=120) == "completed"
    _check_run_and_file(tree, "cx")

    rows = _step_rows(tree, "cx")
    first, second = rows[0][-1], rows[2][-1]
    expected = [(it, step, "completed", 0, "", None, "gpt-5.5", *STEP_TOKENS, session)
                for it, session in ((1, first), (2, second)) for step in ("MAKE", "CHECK")]
    assert rows == expected and first != second
    calls = mock_llm.posts("/v1/responses")
    _check_conversations(calls, [str(_header(c, "session-id")) for c in calls])
    assert list((ndir / ".codex" / "sessions").rglob("*.jsonl"))  # the node's own sessions
    assert _files(user_codex) == before


@pytest.mark.parametrize("configured", [False, True], ids=["home", "config_dir"])
def test_claude_resumes_its_session_when_the_users_config_dir_is_missing(
        real_tree: Tree, agent_bin: Path, mock_llm: MockLLM, tmp_path: Path,
        configured: bool) -> None:
    """A HOME without ``.claude`` (or a ``CLAUDE_CONFIG_DIR`` naming a missing dir): the
    launch still runs in the node's own Claude home, so the next step of the iteration
    finds the session the first one wrote there (issue 29: it once failed with "No
    conversation found with session ID")."""
    tree, home = real_tree, tmp_path / "home"
    set_sandbox(tree.repo, "on")
    config = home / "config" / "claude" if configured else home / ".claude"
    env = start_env(home, agent_bin, mock_llm)
    if configured:
        env["CLAUDE_CONFIG_DIR"] = str(config)
    else:
        del env["CLAUDE_CONFIG_DIR"]
    ndir = tree.node("cl", STEPS, "--agent", "claude", "--model", "claude-opus-4-8",
                     "--no-sync", "--max-iters", "2", node_md=NODE_MD)
    tree.cli("node", "start", "cl", env=env)
    assert tree.wait_settled("cl", timeout=120) == "completed"
    _check_run_and_file(tree, "cl")

    rows = _step_rows(tree, "cl")
    assert [row[:5] for row in rows] == [(it, step, "completed", 0, "")
                                         for it in (1, 2) for step in ("MAKE", "CHECK")]
    assert rows[0][-1] == rows[1][-1] != rows[2][-1] == rows[3][-1]
    stored = {p.stem for p in (ndir / ".claude" / "home" / "projects").glob("*/*.jsonl")}
    assert {rows[0][-1], rows[2][-1]} <= stored
    # The user's dir now exists, private, the way Claude Code makes it; no session in it.
    assert config.is_dir() and config.stat().st_mode & 0o777 == 0o700
    assert not list(config.rglob("*.jsonl"))
