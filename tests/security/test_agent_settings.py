"""A sandboxed agent cannot plant a command or a standing instruction in the user's agent
CLI settings: ``~/.claude/settings.json`` (its hooks run commands),
``~/.codex/config.toml``, ``~/.claude/CLAUDE.md`` and ``~/.codex/AGENTS.md`` (read by
every later agent, the operator's own included). On the code before, each was pinned
read-only only when it already existed, so an agent created the absent ones, and
CLAUDE.md was writable."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.security.conftest import hostile_node, read_report
from tests.trees import Tree

pytestmark = pytest.mark.e2e

ATTACKS = """
def plant(path, text):
    with open(path, "a") as fh:
        fh.write(text)
    return path

for name in FACTS["files"]:
    attempt(name, lambda name=name: plant(os.path.join(FACTS["home"], name),
                                          "planted by the agent\\n"))
"""

FILES = (".claude/settings.json", ".codex/config.toml", ".claude/CLAUDE.md",
         ".codex/AGENTS.md")


def test_a_sandboxed_agent_cannot_plant_agent_settings(
        sandboxed_tree: Tree, tmp_path: Path) -> None:
    tree = sandboxed_tree
    home = Path(os.environ["HOME"])
    made = [home / d for d in (".claude", ".codex") if not (home / d).exists()]
    for directory in made:
        directory.mkdir()
    existing = {name: (home / name).read_bytes() for name in FILES
                if (home / name).exists()}
    try:
        report_path = hostile_node(tree, tmp_path, ATTACKS,
                                   {"home": str(home), "files": list(FILES)})
        tree.cli("node", "start", "a.b")
        assert tree.wait_settled("a.b", timeout=300) == "completed"
        report = read_report(report_path)
        for name in FILES:
            assert report[name]["ok"] is False, (name, report[name])
            text = (home / name).read_text()
            assert "planted" not in text, name
            assert text == existing.get(name, b"{}\n" if name.endswith(".json") else
                                        b"").decode()  # made empty, or left as it was
    finally:
        for directory in made:
            shutil.rmtree(directory, ignore_errors=True)
