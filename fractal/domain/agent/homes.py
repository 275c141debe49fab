"""Where a node's agent homes live inside its node directory (pure path arithmetic).

Claude Code reads ``<node_dir>/.claude/settings.json`` (passed with ``--settings``);
Codex keeps its whole home in ``<node_dir>/.codex/`` (its ``CODEX_HOME``). The backends
(``fractal.agents``) point the agent at these paths; ``fractal.workspace.agenthomes``
seeds them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

__all__ = ["CLAUDE_DIR", "CODEX_DIR", "claude_settings_path", "codex_home", "codex_login"]

CLAUDE_DIR = ".claude"
CODEX_DIR = ".codex"


def claude_settings_path(node_dir: Path) -> Path:
    """``<node_dir>/.claude/settings.json``: the file passed to ``claude --settings``."""
    return node_dir / CLAUDE_DIR / "settings.json"


def codex_home(node_dir: Path) -> Path:
    """``<node_dir>/.codex``: the node's ``CODEX_HOME``."""
    return node_dir / CODEX_DIR


def codex_login(environ: Mapping[str, str]) -> Path | None:
    """The user's Codex login: ``$CODEX_HOME/auth.json`` when set, else
    ``$HOME/.codex/auth.json``; None when neither variable is set."""
    home = environ.get("CODEX_HOME")
    if home:
        return Path(home).expanduser() / "auth.json"
    return Path(environ["HOME"]) / CODEX_DIR / "auth.json" if environ.get("HOME") else None
