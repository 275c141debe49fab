"""Parsed node files kept between iterations while the file on disk is unchanged.

The loop re-reads ``config.json`` and every step file at each iteration (they are live:
an edit counts at the next iteration). ``FileCache.get(path, parse)`` returns the value
``parse(path)`` gave last time when the file's identity and stamp are the same as then
(device, inode, size, modification and change time in ns), else parses again. A stamp
read less than RACY_S seconds after the file's last change is not trusted (a second
write in the same timestamp tick with the same size would look unchanged), so such a
file is parsed again at the next call. ``parse`` raising is never cached: the next call
tries again. A missing or unreadable path is not cached either (``parse`` reports it).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from fractal.domain.config import NodeConfig, parse_config
from fractal.domain.frontmatter import Frontmatter, frontmatter_warnings, parse_frontmatter
from fractal.workspace.nodedir import read_config

__all__ = ["FILES", "RACY_S", "FileCache", "live_config", "parse_step_file"]

T = TypeVar("T")

RACY_S = 2.0
"""Seconds after a file's last change during which its stamp alone does not prove it
unchanged (coarse filesystem timestamps)."""

_Stamp = tuple[int, int, int, int, int]


def _stamp(path: Path) -> tuple[_Stamp, float] | None:
    """(identity and stamp, last change in epoch s), or None for anything but a regular file."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if (st.st_mode & 0o170000) != 0o100000:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns), \
        max(st.st_mtime_ns, st.st_ctime_ns) / 1e9


class FileCache:
    """One process's cache of parsed files (see the module docstring); not thread-safe."""

    def __init__(self, now: Callable[[], float] = time.time) -> None:
        self._now = now  # the epoch clock file timestamps are compared with
        self._entries: dict[tuple[Path, object], tuple[_Stamp, object]] = {}

    def get(self, path: Path, parse: Callable[[Path], T]) -> T:
        """``parse(path)``, or its earlier value while the file is unchanged. Raises what
        ``parse`` raises."""
        key = (path, parse)
        before = _stamp(path)
        if before is not None:
            held = self._entries.get(key)
            if held is not None and held[0] == before[0]:
                return held[1]  # type: ignore[return-value]
        self._entries.pop(key, None)
        value = parse(path)
        after = _stamp(path)
        if (before is not None and after is not None and after[0] == before[0]
                and self._now() - after[1] >= RACY_S):
            self._entries[key] = (after[0], value)
        return value


FILES = FileCache()
"""The supervisor's cache of its node's live files (``config.json``, the step files)."""


def live_config(path: Path) -> NodeConfig:
    """``config.json`` at ``path`` read and checked. Raises FractalError, OSError."""
    return parse_config(read_config(path), source=str(path))


def parse_step_file(path: Path) -> tuple[Frontmatter, tuple[str, ...]]:
    """A step file's parsed frontmatter and the likely mistakes in it. Raises OSError,
    UnicodeDecodeError (not UTF-8)."""
    text = path.read_bytes().decode("utf-8")
    return parse_frontmatter(text), tuple(frontmatter_warnings(text))
