"""Per-node agent homes (workspace.agenthomes): seeded once, never overwritten, the Codex
login linked (never copied), both kept out of git; claude gets --settings when it exists."""

from __future__ import annotations

import json
from pathlib import Path

from fractal.agents.base import LaunchRequest
from fractal.agents.claude import ClaudeBackend
from fractal.workspace.agenthomes import (
    DEFAULT_CLAUDE_SETTINGS,
    claude_settings_path,
    codex_home,
    seed_agent_homes,
)
from fractal.workspace.artifacts import is_runtime_artifact


def test_seed_writes_settings_and_links_the_codex_login(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    auth = home / ".codex" / "auth.json"
    auth.write_text('{"token": "secret"}')
    node_dir = tmp_path / "node"
    seed_agent_homes(node_dir, {"HOME": str(home)})
    settings = claude_settings_path(node_dir)
    assert json.loads(settings.read_text()) == DEFAULT_CLAUDE_SETTINGS
    link = codex_home(node_dir) / "auth.json"
    assert link.is_symlink() and link.resolve() == auth.resolve()  # linked, not copied
    assert codex_home(node_dir).stat().st_mode & 0o777 == 0o700


def test_seed_never_overwrites_and_skips_a_missing_login(tmp_path: Path) -> None:
    node_dir = tmp_path / "node"
    settings = claude_settings_path(node_dir)
    settings.parent.mkdir(parents=True)
    settings.write_text('{"mine": true}\n')
    seed_agent_homes(node_dir, {"HOME": str(tmp_path / "nohome")})
    assert settings.read_text() == '{"mine": true}\n'
    assert codex_home(node_dir).is_dir()
    assert not (codex_home(node_dir) / "auth.json").exists()


def test_codex_home_from_the_environment_is_the_login_source(tmp_path: Path) -> None:
    custom = tmp_path / "custom-codex"
    custom.mkdir()
    (custom / "auth.json").write_text("{}")
    node_dir = tmp_path / "node"
    seed_agent_homes(node_dir, {"HOME": str(tmp_path), "CODEX_HOME": str(custom)})
    assert (codex_home(node_dir) / "auth.json").resolve() == (custom / "auth.json").resolve()


def test_agent_homes_are_runtime_artifacts() -> None:
    assert is_runtime_artifact(".fractal/main.a/.claude/settings.json")
    assert is_runtime_artifact(".fractal/main.a/.codex/auth.json")
    assert is_runtime_artifact(".fractal/main.a/.codex/sessions/2026/11/30/rollout-x.jsonl")
    assert not is_runtime_artifact(".fractal/main.a/NODE.md")


def test_claude_gets_the_settings_file_once_seeded(tmp_path: Path) -> None:
    node_dir = tmp_path / "node"
    req = LaunchRequest(prompt="p", worktree=tmp_path, node_dir=node_dir, new_session="u")
    assert "--settings" not in ClaudeBackend().invocation(req).argv
    seed_agent_homes(node_dir, {"HOME": str(tmp_path)})
    argv = ClaudeBackend().invocation(req).argv
    assert argv[argv.index("--settings") + 1] == str(claude_settings_path(node_dir))
