"""The real CLIs reach fractal and keep their environment (issue "a night alone").

Codex runs its shell tool calls in a login shell, and Debian's ``/etc/profile`` sets
PATH outright there, so a ``fractal`` found only on the start shell's PATH (a venv's
``bin``) is ``command not found``. The prompts name the run's fractal by its path
(``$FRACTAL_BIN``, rendered): the mock model makes Codex run the commit command exactly
as the step states it, and the commit lands as the agent's own (a ``commit`` event and
the agent's subject), not as the loop's backstop.

A run parked by ``tmux kill-server`` and resumed from a shell that has neither the
mock's address nor its key (a dead loopback port and another key instead) still talks
to the mock with the start shell's key: the resume restored the run's environment.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from tests.agents.conftest import CODEX_FLAGS, codex_config, start_env
from tests.agents.mock_llm import MockLLM
from tests.agents.mock_wire import Options
from tests.e2e.conftest import Tree
from tests.helpers import FRACTAL_BIN, git, wait_until

pytestmark = [pytest.mark.agents, pytest.mark.timeout(720)]  # a first install included

COMMIT_STEP = {"01-COMMIT.md": (
    'Write the log, then commit it with `$FRACTAL_BIN commit "add the log"`. '
    '[mock:bash=echo logged > hello.txt && $FRACTAL_BIN commit "add the log"]\n')}


def _header(request: dict[str, object], name: str) -> str | None:
    headers = request["headers"]
    assert isinstance(headers, dict)
    return next((str(v) for k, v in headers.items() if k.lower() == name), None)


def test_codex_runs_the_prompts_fractal_commit_in_its_login_shell(
        real_tree: Tree, agent_bin: Path, mock_llm: MockLLM, tmp_path: Path) -> None:
    tree = real_tree
    ndir = tree.node("cx", COMMIT_STEP, "--agent", f"codex {CODEX_FLAGS}", "--model",
                     "gpt-5.5", "--no-sync", "--max-iters", "1")
    (ndir / ".codex" / "config.toml").write_text(codex_config(mock_llm))
    env = start_env(tmp_path / "home", agent_bin, mock_llm)
    # fractal installed the README's way: its venv's bin on the start shell's PATH (the
    # login shell drops it: a bare `fractal` is `command not found` there)
    env["PATH"] = f"{Path(FRACTAL_BIN).parent}{os.pathsep}{env['PATH']}"
    tree.cli("node", "start", "cx", env=env)
    assert tree.wait_settled("cx", timeout=120) == "completed", \
        (ndir / "pane.log").read_text(errors="replace")[-3000:]

    # the tool call Codex ran is the prompt's command, with the run's fractal by path
    calls = mock_llm.posts("/v1/responses")
    assert calls[0]["answer"]["arguments"] == {
        "cmd": f'echo logged > hello.txt && {FRACTAL_BIN} commit "add the log"'}
    # the agent's own commit: its subject, its event; the backstop found nothing left
    subjects = git(tree.repo, "log", "--format=%s", "main.cx").splitlines()
    (run_id,), = tree.sql("SELECT run_id FROM runs WHERE node = 'main.cx'")
    assert subjects[0] == f"main.cx: iteration {run_id}.1 (add the log)"
    assert not any(s.endswith("(auto)") for s in subjects)
    assert git(tree.repo, "show", "main.cx:hello.txt") == "logged"
    ((sha,),) = tree.sql("SELECT metadata FROM events WHERE node = 'main.cx' AND "
                         "event = 'commit' AND status = 'completed'")
    assert git(tree.repo, "rev-parse", "main.cx") == sha


def test_a_resume_from_a_shell_without_the_key_still_authenticates(
        real_tree: Tree, agent_bin: Path, tmp_path: Path) -> None:
    tree = real_tree
    mock = MockLLM(Options(stall=300.0)).start()  # the first call hangs until the park
    try:
        tree.node("cl", {"01-LOG.md": "Log it. [mock:bash=echo resumed >> hello.txt]\n"},
                  "--agent", "claude", "--model", "claude-opus-4-8", "--no-sync",
                  "--max-iters", "1")
        socket = str(tmp_path / "own.sock")
        start = start_env(tmp_path / "home", agent_bin, mock, ANTHROPIC_API_KEY="start-key",
                          FRACTAL_TMUX_SOCKET=socket)
        tree.cli("node", "start", "cl", env=start)
        wait_until(lambda: mock.posts("/v1/messages"), timeout=60,
                   message="the first model call (it stalls)")
        subprocess.run(["tmux", "-S", socket, "kill-server"], capture_output=True, check=False)
        wait_until(lambda: tree.status("cl") == "paused", timeout=60, message="cl parked")
        seen = len(mock.requests)
        mock.options = replace(mock.options, stall=0.0)

        # another shell: no mock address, no key of its own (a dead loopback port instead)
        other = {k: v for k, v in start.items()
                 if not k.startswith(("ANTHROPIC_", "CLAUDE_", "HOME"))}
        other.update(HOME=str(tmp_path / "elsewhere"), ANTHROPIC_API_KEY="wrong-key",
                     ANTHROPIC_BASE_URL="http://127.0.0.1:9")
        os.makedirs(other["HOME"], exist_ok=True)
        done = tree.cli("node", "resume", "cl", env=other)
        assert "refreshed" not in done.stderr
        assert tree.wait_settled("cl", timeout=120) == "completed", \
            (tree.node_dir("cl") / "pane.log").read_text(errors="replace")[-3000:]
    finally:
        mock.stop()
    after = [r for r in mock.requests[seen:] if r["method"] == "POST"]
    assert after, "the resumed run made no model call to the mock"
    assert {_header(r, "x-api-key") for r in after} == {"start-key"}
    assert "resumed" in git(tree.repo, "show", "main.cl:hello.txt")
