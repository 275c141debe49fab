"""Fixtures of the real-CLI tier: the pinned CLIs (installed once from npm), a loopback
mock LLM per test, a tree in a fresh repository, and the environment spec/agent-clis.md
documents for running each CLI against the mock with no traffic leaving loopback.

The tier is skipped, with the reason in pytest's summary, when npm is missing or the
registry cannot be reached.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agents.install import Unavailable, ensure_installed
from tests.agents.mock_llm import MockLLM
from tests.trees import Tree, init_tree

# The caller's environment, read at collection time, before the hermetic session fixture
# moves HOME: npm needs the user's own .npmrc (registry, CA file) and cache.
_CALLER_ENV = dict(os.environ)

CODEX_FLAGS = ("--skip-git-repo-check --dangerously-bypass-approvals-and-sandbox "
               "--disable plugins --disable remote_plugin --disable apps "
               "--disable api_key_model_discovery")
"""Extra words of the node's ``agent`` setting for codex (they follow ``exec``). Without
the four ``--disable`` flags Codex reaches for hosts outside loopback (spec/agent-clis.md)."""


@pytest.fixture(scope="session")
def agent_bin() -> Path:
    """The directory holding the pinned ``claude`` and ``codex``; installs them on first
    use (minutes at most), skips the tier when npm or its registry is unavailable."""
    try:
        return ensure_installed(_CALLER_ENV)
    except Unavailable as exc:
        pytest.skip(f"real-CLI tier (make test-agents) skipped: {exc}")


@pytest.fixture
def mock_llm() -> Iterator[MockLLM]:
    """A fresh mock on 127.0.0.1 (any free port), 1000 input / 100 output tokens per call."""
    mock = MockLLM().start()
    try:
        yield mock
    finally:
        mock.stop()


@pytest.fixture
def real_tree(tmp_path: Path, agent_bin: Path) -> Iterator[Tree]:
    """A repository with a tree (``fractal init``) for nodes that run the real CLIs."""
    init_tree(tmp_path / "repo", None)
    tree = Tree(repo=tmp_path / "repo", agent=agent_bin / "claude")
    try:
        yield tree
    finally:
        tree.kill_sessions()


def start_env(home: Path, agent_bin: Path, mock: MockLLM, **extra: str) -> dict[str, str]:
    """The environment for ``fractal node start`` (it reaches the agent unchanged).

    spec/agent-clis.md: an isolated HOME and CLAUDE_CONFIG_DIR (sessions land in
    ``$CLAUDE_CONFIG_DIR/projects``), Claude pointed at the mock with a dummy key and every
    non-essential call, update and report turned off, ``IS_SANDBOX=1`` when running as root,
    a low retry count; ``MOCK_API_KEY`` for Codex's custom provider (``codex_config``).
    """
    home.mkdir(parents=True, exist_ok=True)
    env = {**os.environ,
           "PATH": f"{agent_bin}{os.pathsep}{os.environ.get('PATH', '')}",
           "HOME": str(home), "CLAUDE_CONFIG_DIR": str(home / ".claude"),
           "ANTHROPIC_BASE_URL": mock.url, "ANTHROPIC_API_KEY": "dummy",
           "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1",
           "DISABLE_AUTOUPDATER": "1", "DISABLE_UPDATES": "1",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "CLAUDE_CODE_MAX_RETRIES": "2",
           "MOCK_API_KEY": "dummy"}
    for key in ("ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY", "CODEX_API_KEY", "OPENAI_BASE_URL",
                "OPENROUTER_API_KEY", "CODEX_HOME"):
        env.pop(key, None)
    if os.geteuid() == 0:
        env["IS_SANDBOX"] = "1"
    env.update(extra)
    return env


def codex_config(mock: MockLLM, **provider: str | int) -> str:
    """``config.toml`` for a node's ``CODEX_HOME``: the mock as a custom Responses provider
    (Codex ignores OPENAI_BASE_URL), no update check, no analytics. ``provider`` adds keys
    to the provider table (``request_max_retries=0``)."""
    table = {"name": "mock", "base_url": f"{mock.url}/v1", "env_key": "MOCK_API_KEY",
             "wire_api": "responses", **provider}
    lines = ['model_provider = "mock"', "check_for_update_on_startup = false", "",
             "[analytics]", "enabled = false", "", "[model_providers.mock]"]
    lines += [f"{key} = {value}" if isinstance(value, int) else f'{key} = "{value}"'
              for key, value in table.items()]
    return "\n".join(lines) + "\n"
