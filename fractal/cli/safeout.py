"""What every command writes to a terminal passes ``domain.termtext.terminal_text``.

``guard_terminal`` replaces ``sys.stdout`` and ``sys.stderr``, where each is a terminal,
with a ``SafeText`` that strips escape sequences and control characters (not newlines and
tabs) from each write: whatever a node wrote (a title, a radio subject, a reason, a file
in a diff) reaches the operator's screen as text. A stream piped elsewhere is data and
stays byte-exact, except the listings (``format.render_rows``) and radio messages, which
are sanitised whatever the stream (``--json`` escapes control characters by itself).
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from fractal.domain.termtext import terminal_text

__all__ = ["SafeText", "guard_terminal"]


class SafeText:
    """A text stream that writes ``terminal_text(s)`` to ``inner``; every other attribute
    (``isatty``, ``encoding``, ``flush``, ``buffer``...) is ``inner``'s."""

    def __init__(self, inner: TextIO) -> None:
        self._inner = inner

    def write(self, text: str) -> int:
        """Write ``text`` without its escape sequences; returns ``len(text)`` (all of it
        was taken)."""
        self._inner.write(terminal_text(text))
        return len(text)

    def writelines(self, lines: Any) -> None:
        """``write`` each of ``lines``."""
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def guard_terminal() -> None:
    """Wrap ``sys.stdout`` and ``sys.stderr`` in ``SafeText`` where each is a terminal."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        try:
            tty = stream is not None and not isinstance(stream, SafeText) and stream.isatty()
        except (OSError, ValueError):
            tty = False
        if tty:
            setattr(sys, name, SafeText(stream))
