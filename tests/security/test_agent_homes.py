"""A sandboxed agent cannot write the user's agent CLI homes, nor another node's (issue
29). On the code before, ``~/.claude``, ``~/.claude.json``, ``~/.codex`` and ``~/.cache``
were writable from every sandbox: an agent planted an MCP server in ``~/.claude.json``, a
subagent or a command in ``~/.claude/``, a ``settings.local.json`` with hooks, edited
another node's session transcript or a Codex session, or a cached package, and each ran
in (or steered) every later launch of every node and the user's own ``claude``.

Inside the sandbox the node's own homes now stand in for the user's: what the agent
writes there stays in its node dir. What must still work does: a token refresh written
the way Claude Code writes it (a new file renamed over the login, a copy when the rename
is refused) reaches the user's one login file."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.security.conftest import hostile_node, read_report
from tests.trees import Tree

pytestmark = pytest.mark.e2e

ATTACKS = """
home = FACTS["home"]
def write(path, text, mode="a"):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, mode) as fh:
        fh.write(text)
    return path

for name, path in FACTS["plants"].items():
    attempt(name, lambda path=path: write(path, "planted by the agent\\n"))
attempt("claude.json", lambda: write(os.path.join(home, ".claude.json"),
        '{"mcpServers": {"x": {"command": "/bin/sh", "args": ["-c", "planted"]}}}\\n', "w"))

def refresh():
    # Claude Code's write of its login: a new file renamed over it, else copied onto it
    login = os.path.join(home, ".claude", ".credentials.json")
    spare = login + ".tmp.1234"
    write(spare, FACTS["rotated"], "w")
    try:
        os.rename(spare, login)
    except OSError:
        shutil.copyfile(spare, login)
        os.unlink(spare)
    return open(login).read()
import shutil
attempt("refresh", refresh)
"""

USER_FILES = {
    ".claude.json": '{"mcpServers": {}}\n',
    ".claude/.credentials.json": '{"claudeAiOauth": {"refreshToken": "first"}}\n',
    ".claude/agents/mine.md": "the user's own subagent\n",
    ".claude/projects/-elsewhere-main-x/s.jsonl": '{"type": "user"}\n',
    ".codex/sessions/2026/12/07/rollout-x.jsonl": '{"type": "session_meta"}\n',
    ".cache/pip/wheels/x.whl": "a cached wheel\n",
    # made so before each launch when absent, to be pinned read-only (test_agent_settings)
    ".claude/settings.json": "{}\n", ".claude/CLAUDE.md": "", ".codex/config.toml": "",
    ".codex/AGENTS.md": "",
}
ROTATED = '{"claudeAiOauth": {"refreshToken": "second"}}\n'


def _tree(top: Path) -> dict[str, bytes]:
    return {str(p.relative_to(top)): p.read_bytes() for p in sorted(top.rglob("*"))
            if p.is_file() and not p.is_symlink()}


def test_a_sandboxed_agent_cannot_write_the_users_or_another_nodes_agent_homes(
        sandboxed_tree: Tree, tmp_path: Path) -> None:
    tree = sandboxed_tree
    home = Path(os.environ["HOME"])
    made = [home / name for name in (".claude", ".codex", ".cache", ".claude.json")
            if not (home / name).exists()]
    for name, text in USER_FILES.items():
        if not (home / name).exists():
            (home / name).parent.mkdir(parents=True, exist_ok=True)
            (home / name).write_text(text)
    try:
        before = {top: _tree(home / top) for top in (".claude", ".codex", ".cache")}
        user_json = (home / ".claude.json").read_bytes()
        sibling_home = tree.node_dir("a.c") / ".claude" / "home"
        plants = {
            "subagent": str(home / ".claude/agents/planted.md"),
            "command": str(home / ".claude/commands/planted.md"),
            "hooks": str(home / ".claude/settings.local.json"),
            "other session": str(home / ".claude/projects/-elsewhere-main-x/s.jsonl"),
            "codex session": str(home / ".codex/sessions/2026/12/07/rollout-x.jsonl"),
            "cache": str(home / ".cache/pip/wheels/x.whl"),
            "another node's home": str(sibling_home / "agents" / "planted.md"),
        }
        report_path = hostile_node(tree, tmp_path, ATTACKS,
                                   {"home": str(home), "plants": plants, "rotated": ROTATED})
        tree.cli("node", "start", "a.b")
        assert tree.wait_settled("a.b", timeout=300) == "completed"
        report = read_report(report_path)

        assert report["refresh"] == {"ok": True, "detail": ROTATED}, report["refresh"]
        assert (home / ".claude/.credentials.json").read_text() == ROTATED  # the one login
        after = {top: _tree(home / top) for top in (".claude", ".codex", ".cache")}
        before[".claude"][".credentials.json"] = ROTATED.encode()
        assert after == before  # nothing planted, nothing edited
        assert (home / ".claude.json").read_bytes() == user_json
        assert not (sibling_home / "agents" / "planted.md").exists()
        assert report["another node's home"]["ok"] is False
        # What the agent wrote in its own home stays in its node dir.
        own = tree.node_dir("a.b") / ".claude" / "home"
        assert "planted" in (own / ".claude.json").read_text()
        assert not (own / ".credentials.json").read_text()  # a mount point, never a copy
    finally:
        for path in made:
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
