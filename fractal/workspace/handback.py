"""The hand-back note: what ``fractal node merge --hand-back`` left a child to resolve.

``<node_dir>/.handback`` (a runtime artifact, never committed) holds JSON ``{"target":
branch, "target_sha": sha, "files": [paths]}``. While it exists, every prompt of the
child's runs carries the packaged RESOLVE mode document naming the files and the target;
the merge that finally lands the child removes it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from fractal.assets import mode_text
from fractal.workspace.nodedir import write_atomic

__all__ = ["NOTE_NAME", "HandBack", "clear_note", "read_note", "resolve_document",
           "write_note"]

NOTE_NAME = ".handback"


@dataclass(frozen=True)
class HandBack:
    """A conflict handed back: the ``target`` it came from, the target's tip that was
    merged into the child (``target_sha``) and the conflicting ``files``."""

    target: str
    target_sha: str
    files: tuple[str, ...]


def write_note(node_dir: Path, note: HandBack) -> Path:
    """Write ``note`` atomically into ``node_dir``; return its path. ``node_dir`` and its
    ``.fractal`` are made real directories first (a link in their place is removed, never
    followed: ``nodelinks.real_node_dir``). Raises OSError."""
    from fractal.workspace.nodelinks import real_node_dir  # deferred: only writes need it

    path = real_node_dir(node_dir) / NOTE_NAME
    data = {"target": note.target, "target_sha": note.target_sha, "files": list(note.files)}
    write_atomic(path, (json.dumps(data, indent=2) + "\n").encode("utf-8"))
    return path


def read_note(node_dir: Path) -> HandBack | None:
    """The note in ``node_dir``, or None when there is none (or it is unreadable)."""
    path = node_dir / NOTE_NAME
    try:
        if not path.is_file():
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
        files = tuple(str(f) for f in data.get("files", []))
        return HandBack(str(data["target"]), str(data.get("target_sha", "")), files)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None


def clear_note(node_dir: Path) -> bool:
    """Remove the note; True when there was one."""
    path = node_dir / NOTE_NAME
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


def resolve_document(note: HandBack) -> str:
    """The RESOLVE mode document with the target and the file list filled in."""
    files = "\n".join(f"- `{f}`" for f in note.files) or "- (git lists them: `git status`)"
    return mode_text("RESOLVE").replace("$RESOLVE_TARGET", note.target) \
        .replace("$RESOLVE_FILES", files)
