"""The backend table: which agent CLIs fractal drives by name, and how an ``agent`` setting
picks one.

The table is static (``BACKENDS``: name -> module and class), so nothing registers itself
by being imported; a backend's module is imported only when a setting names it. Adding a
backend is one row here plus its module under ``fractal/agents/``.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path

from fractal.agents.base import DEFAULT_AGENT, Backend, split_agent

__all__ = ["BACKENDS", "backend_names", "named_backend", "resolve_backend"]

BACKENDS: Mapping[str, tuple[str, str]] = {
    "claude": ("fractal.agents.claude", "ClaudeBackend"),
    "codex": ("fractal.agents.codex", "CodexBackend"),
}
"""Backend name -> (module, class); the class is built as ``cls(extra_words)``."""


def backend_names() -> list[str]:
    """The names an ``agent`` setting may start with to pick a built-in backend."""
    return sorted(BACKENDS)


def named_backend(name: str, extra: list[str]) -> Backend | None:
    """The built-in backend ``name`` with ``extra`` words after its binary, or None when
    ``name`` is not in the table."""
    entry = BACKENDS.get(name)
    if entry is None:
        return None
    module, attr = entry
    factory = getattr(importlib.import_module(module), attr)
    backend: Backend = factory(extra)
    return backend


def resolve_backend(setting: str | None, worktree: Path) -> Backend:
    """The backend for an ``agent`` setting (None: the default, ``claude``).

    A first word naming a built-in backend (``claude``, ``codex``) selects it, with any
    further words passed through; anything else is a command run by the ``command``
    backend (a relative path resolves against the worktree). The setting splits on
    whitespace only. Raises InvalidValue for quotes, backslashes or an empty setting.
    """
    words = split_agent(setting or DEFAULT_AGENT)
    found = named_backend(words[0], words[1:])
    if found is not None:
        return found
    from fractal.agents.command import CommandBackend  # deferred: start-up cost (4 modules)

    return CommandBackend(words, worktree)
