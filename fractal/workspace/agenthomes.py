"""Per-node agent homes: the files a real agent CLI reads from the node directory.

Each node gets its own agent home. Claude Code gets a settings file,
``<node_dir>/.claude/settings.json``, passed with ``--settings``; Codex gets its whole home,
``<node_dir>/.codex/`` as ``CODEX_HOME``, where it keeps sessions and sqlite files, with
``auth.json`` symlinked to the user's login (never copied, so a token refresh is seen by
every node and no secret is duplicated). Both directories are runtime artifacts
(``workspace.artifacts``): they are seeded by ``fractal node init`` and seeded again when
missing at the start of a run. Seeding never overwrites a file that exists.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path

from fractal.domain.agent.homes import (
    CLAUDE_DIR,
    CODEX_DIR,
    claude_settings_path,
    codex_home,
    codex_login,
)
from fractal.workspace.nodedir import write_atomic

__all__ = [
    "CLAUDE_DIR",
    "CODEX_DIR",
    "DEFAULT_CLAUDE_SETTINGS",
    "claude_settings_path",
    "codex_home",
    "seed_agent_homes",
    "user_codex_auth",
]

log = logging.getLogger(__name__)

DEFAULT_CLAUDE_SETTINGS: dict[str, object] = {
    # Headless runs cannot answer permission prompts: allow the working tools up front
    # (a narrower list than bypassPermissions, which Claude Code refuses as root).
    "permissions": {
        "allow": ["Bash", "Edit", "Write", "MultiEdit", "NotebookEdit", "Read", "Glob", "Grep",
                  "LS", "TodoWrite", "WebFetch", "WebSearch"],
    },
    "includeCoAuthoredBy": False,
}
"""The seeded ``settings.json``; edit the node's copy to change what the agent may do."""


def user_codex_auth(environ: Mapping[str, str]) -> Path:
    """The user's Codex login: ``$CODEX_HOME/auth.json`` when set, else ``~/.codex/auth.json``
    (``~`` from ``environ["HOME"]``, falling back to this process's home)."""
    return codex_login(environ) or Path.home() / CODEX_DIR / "auth.json"


def seed_agent_homes(node_dir: Path, environ: Mapping[str, str] | None = None) -> None:
    """Create the node's agent homes; never overwrite anything that exists.

    Writes ``.claude/settings.json`` (DEFAULT_CLAUDE_SETTINGS) and creates ``.codex/``
    (mode 0700) with ``auth.json`` symlinked to ``user_codex_auth(environ)`` (resolved)
    when that file exists. ``environ`` defaults to ``os.environ``. Raises OSError when the
    node directory cannot be written; a link that cannot be made is logged and skipped.
    """
    env = os.environ if environ is None else environ
    settings = claude_settings_path(node_dir)
    if not settings.exists():
        settings.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(settings, json.dumps(DEFAULT_CLAUDE_SETTINGS, indent=2) + "\n")
    home = codex_home(node_dir)
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    link = home / "auth.json"
    source = user_codex_auth(env)
    if link.exists() or link.is_symlink() or not source.is_file():
        return
    target = source.resolve()
    if target.parent == home.resolve():
        return  # CODEX_HOME already points at this node's home
    try:
        link.symlink_to(target)
    except OSError as exc:
        log.warning("could not link %s to %s: %s", link, target, exc)
