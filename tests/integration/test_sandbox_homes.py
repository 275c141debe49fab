"""A node's agent homes made fresh before each sandboxed launch
(``workspace.sandboxpaths.sandbox_paths``): the node's ``.claude.json`` is the user's
again whatever the last launch left, a symlink the agent put in place of its Claude home
or cache is replaced by a directory (nothing fractal binds or writes can lead outside
the node dir), the Codex login link points at the user's file again, the user's Claude
config dir is made when missing, and of the user's other homes only those that exist are
bound."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fractal.domain.sandbox import SandboxPaths
from fractal.workspace.sandboxpaths import sandbox_paths
from tests.helpers import git, make_repo

Layout = tuple[Path, Path, Path, Path]


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    """(repo, worktree, node dir, the user's home)."""
    repo = make_repo(tmp_path / "repo")
    worktree = repo / ".worktrees" / "main.a"
    git(repo, "worktree", "add", "-q", "-b", "main.a", str(worktree))
    node_dir = worktree / ".fractal" / "main.a"
    (node_dir / ".codex").mkdir(parents=True)
    home = tmp_path / "home"
    home.mkdir()
    return repo, worktree, node_dir, home


def _paths(layout: Layout, env: dict[str, str]) -> SandboxPaths:
    repo, worktree, node_dir, home = layout
    return sandbox_paths(repo, worktree, node_dir, "main.a", tmux_socket=repo / "none",
                         relay=None, home=str(home), program=None,
                         env={"HOME": str(home), **env})


def test_the_nodes_claude_json_is_the_users_again_at_each_launch(layout: Layout) -> None:
    _, _, node_dir, home = layout
    (home / ".claude").mkdir()
    (home / ".claude.json").write_text('{"mcpServers": {}}\n')
    first = _paths(layout, {})
    copy = node_dir / ".claude" / "home" / ".claude.json"
    assert copy.read_text() == '{"mcpServers": {}}\n' and copy.stat().st_mode & 0o777 == 0o600
    copy.write_text('{"mcpServers": {"x": {"command": "planted"}}}\n')  # the agent's
    again = _paths(layout, {})
    assert copy.read_text() == '{"mcpServers": {}}\n'
    assert first.claude_json == again.claude_json == str(home / ".claude.json")
    assert again.claude_dir == str(home / ".claude")


def test_under_claude_config_dir_the_copy_is_inside_the_bound_dir(layout: Layout, tmp_path: Path) -> None:
    _, _, node_dir, _ = layout
    config = tmp_path / "config"
    config.mkdir()
    (config / ".claude.json").write_text("{}\n")
    (config / ".credentials.json").write_text("{}\n")
    found = _paths(layout, {"CLAUDE_CONFIG_DIR": str(config)})
    assert found.claude_dir == str(config) and found.claude_json is None
    assert (node_dir / ".claude" / "home" / ".claude.json").read_text() == "{}\n"
    assert found.logins == (str(config / ".credentials.json"),)


def test_a_users_missing_claude_json_leaves_the_node_none(layout: Layout) -> None:
    _, _, node_dir, _ = layout
    copy = node_dir / ".claude" / "home" / ".claude.json"
    copy.parent.mkdir(parents=True)
    copy.write_text("left by the agent\n")
    found = _paths(layout, {})
    assert not copy.exists() and found.claude_json is None
    assert (found.cache, found.logins) == (None, ())


@pytest.mark.parametrize("configured", [False, True], ids=["home", "config_dir"])
def test_a_users_missing_claude_dir_is_made_private_and_bound(
        layout: Layout, tmp_path: Path, configured: bool) -> None:
    """The node's Claude home always has the user's config dir to be bound over (issue
    29): a missing one is made, mode 0700, with the settings pinned read-only in it."""
    _, _, _, home = layout
    config = tmp_path / "config" / "claude" if configured else home / ".claude"
    found = _paths(layout, {"CLAUDE_CONFIG_DIR": str(config)} if configured else {})
    assert found.claude_dir == str(config)
    assert config.is_dir() and config.stat().st_mode & 0o777 == 0o700
    if not configured:
        assert (config / "settings.json").read_text() == "{}\n"


def test_a_file_in_place_of_the_claude_dir_refuses_the_layout(layout: Layout) -> None:
    _, _, _, home = layout
    (home / ".claude").write_text("not a dir\n")
    with pytest.raises(OSError):
        _paths(layout, {})


@pytest.mark.parametrize("name", [".claude/home", "tmp/cache"])
def test_a_symlinked_home_is_replaced_by_a_directory(layout: Layout, name: str) -> None:
    _, _, node_dir, home = layout
    (home / ".claude").mkdir()
    (home / ".cache").mkdir()
    (home / ".claude.json").write_text("{}\n")
    stand_in = node_dir / name
    stand_in.parent.mkdir(parents=True, exist_ok=True)
    stand_in.symlink_to(home / (".claude" if name == ".claude/home" else ".cache"))
    _paths(layout, {})
    assert stand_in.is_dir() and not stand_in.is_symlink()
    assert not (home / ".claude" / ".claude.json").exists()  # nothing written through it


def test_the_codex_login_link_points_at_the_users_file_again(layout: Layout) -> None:
    _, _, node_dir, home = layout
    (home / ".codex").mkdir()
    (home / ".codex" / "auth.json").write_text("{}\n")
    link = node_dir / ".codex" / "auth.json"
    link.symlink_to(home / ".bashrc")  # the agent pointed it elsewhere
    found = _paths(layout, {})
    assert os.readlink(link) == str((home / ".codex" / "auth.json").resolve())
    assert found.logins == (str((home / ".codex" / "auth.json").resolve()),)

