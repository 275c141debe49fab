"""How much of a file a node controls fractal reads: the caps and their refusal text.

A node's agent writes its own ``NODE.md``, step files, ``config.json`` and plans; the
operator names a ``--task-file``. Nothing bounds what they hold, so a reader takes at
most the cap plus one byte and refuses past the cap (docs/security.md, "Bounded inputs").
"""

from __future__ import annotations

__all__ = ["NODE_FILE_CAP", "TASK_FILE_CAP", "over_cap"]

NODE_FILE_CAP = 1 << 20
"""Bytes of ``NODE.md``, a step file or ``config.json`` the loop reads (1 MiB)."""

TASK_FILE_CAP = 1 << 20
"""Bytes of ``node init --task-file FILE`` (1 MiB)."""


def over_cap(what: str, cap: int) -> str:
    """The refusal for ``what`` (a path or a name) holding more than ``cap`` bytes: what
    the cap is and what to do."""
    return (f"{what} is over the {cap // 1024} KiB cap on files fractal reads; shorten it "
            "(move long material to files the agent reads itself and name them there)")
