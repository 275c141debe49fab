"""Text a node wrote, made safe to show on a terminal.

A node (its agent) writes titles, radio subjects and bodies, reasons, notes and step
output; an escape sequence in any of them would reach the operator's terminal, where it
can set the window title, move the cursor over earlier lines, or write the clipboard
(OSC 52). ``terminal_text`` removes every escape sequence (CSI, OSC, DCS, SOS, PM, APC,
and two-character ESC sequences, in their 7-bit and 8-bit forms), every other control
character, and the Unicode bidirectional overrides (which reorder what a line seems to
say). Newlines and tabs stay: multi-line text keeps its lines; ``\\r\\n`` becomes ``\\n``
and a lone ``\\r`` (which returns the cursor to overwrite a line) is removed.

Pure: no I/O. The printing owners apply it (``cli/`` to all it writes, ``runtime/pane.py``,
the dashboard's rows).
"""

from __future__ import annotations

import re
from functools import cache

__all__ = ["terminal_text"]

_SEQUENCE = (
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"             # CSI ... final byte
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])"     # OSC, DCS, SOS, PM, APC ...
    r"[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"        # ... up to BEL or ST (or the end)
    r"|\x1b[ -/]*[0-~]?"                            # ESC (intermediates) final
)
_CONTROL = r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]"


@cache
def _pattern() -> re.Pattern[str]:  # compiled on first use: most commands print no text
    return re.compile(f"{_SEQUENCE}|{_CONTROL}")


def terminal_text(text: str) -> str:
    """``text`` with escape sequences, control characters (but ``\\n`` and ``\\t``) and
    bidirectional overrides removed, ``\\r\\n`` as ``\\n``; unchanged (the same object)
    when it holds none. Never raises."""
    if text.isprintable():  # the common case: nothing to look at (no \n, \t, ESC, C1)
        return text
    return _pattern().sub("", text.replace("\r\n", "\n"))
