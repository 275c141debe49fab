"""Scope entries: the relative paths a scoped node may commit to, in one canonical form.

``./src/``, ``src//`` and ``src`` all mean the same directory; a scope that could leave
the worktree (an absolute path, a ``..`` segment) or that names the worktree root itself
is refused.
"""

from __future__ import annotations

from collections.abc import Iterable

from fractal.domain.errors import InvalidValue

__all__ = ["normalise_scope"]


def normalise_scope(entries: Iterable[str]) -> tuple[str, ...]:
    """Canonicalise scope entries: ``"./src/"`` -> ``"src"``, ``"a//b"`` -> ``"a/b"``.

    Surrounding whitespace and ``.`` segments are dropped; duplicates are removed keeping the
    first. Raises ``InvalidValue`` (key ``scope``) for an absolute path, a ``..`` segment, an
    entry with inner whitespace (``SCOPE_DIR`` is space-joined) or one that is empty or names
    the worktree root itself (leave scope empty instead).
    """
    canonical: list[str] = []
    for entry in entries:
        text = entry.strip()
        if text.startswith("/"):
            raise InvalidValue(f'scope: "{entry}" is absolute; give a path relative to the '
                               "worktree root")
        if any(ch.isspace() for ch in text):
            raise InvalidValue(f'scope: "{entry}" contains whitespace; give one path per entry '
                               "(comma-separated on the command line)")
        segments = [seg for seg in text.split("/") if seg not in ("", ".")]
        if ".." in segments:
            raise InvalidValue(f'scope: "{entry}" has a ".." segment; scope must stay inside '
                               "the worktree")
        if not segments:
            raise InvalidValue(f'scope: "{entry}" is empty or the worktree root; leave scope '
                               "empty for an unscoped node")
        path = "/".join(segments)
        if path not in canonical:
            canonical.append(path)
    return tuple(canonical)
