"""Packaged node seeds: NODE.md, steps/, scripts/ (copied into a node dir) and modes/.

Mode documents are read from here on every use and never copied into a node: a mode
document always comes from the installed package, never a per-node copy. The package is
expected to be installed unpacked (a normal wheel install), so its files are plain paths.
"""

from __future__ import annotations

import re
from pathlib import Path

from fractal.domain.errors import FractalError

__all__ = ["MODES", "asset_root", "mode_text"]

MODES: tuple[str, ...] = ("CHILD", "CONTINUE", "DETACHED", "META", "RESERVE", "RESOLVE",
                          "RESUME", "SYNC", "TREE")
"""Names of the packaged mode documents (``modes/<NAME>.md``)."""

_NAME = re.compile(r"[A-Z][A-Z0-9_]*")


def asset_root() -> Path:
    """Return the absolute directory holding the packaged assets (this package's directory)."""
    return Path(__file__).resolve().parent


def mode_text(name: str) -> str:
    """Return the text of the packaged mode document ``modes/<name>.md``.

    ``name`` is the upper-case mode name, e.g. ``"SYNC"`` or ``"RESERVE"``. Raises
    FractalError for a name that is not a packaged mode, or when the file is missing from
    the installation (reinstall fractal).
    """
    if not _NAME.fullmatch(name):
        raise FractalError(f"invalid mode name {name!r}: use an upper-case name such as 'SYNC'")
    path = asset_root() / "modes" / f"{name}.md"
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        known = ", ".join(MODES)
        raise FractalError(
            f"no packaged mode document {name!r} at {path} (known: {known}); "
            "if the name is right, reinstall fractal"
        ) from None
