"""Parsed node files kept between iterations while the file on disk is unchanged.

The loop re-reads ``config.json`` and every step file at each iteration (they are live:
an edit counts at the next iteration). ``FileCache.get(path, load)`` reads the file and
returns ``load(path, data)`` for its bytes, or the value it gave last time while the
file's identity and stamp are the same as then (device, inode, size, modification and
change time in ns). A stamp read less than RACY_S seconds after the file's last change
proves nothing by itself (a second write in the same timestamp tick with the same size
would look unchanged), so such an entry is checked by content: the file is read again
and its bytes compared with the ones the value was made from (a read, not a parse).
``load`` raising is never cached: the next call tries again. A missing, unreadable or
special path is not cached either: ``load(path, None)`` reads (and reports) it itself.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from fractal.domain.config import NodeConfig, parse_config
from fractal.domain.limits import NODE_FILE_CAP, over_cap
from fractal.domain.steps.frontmatter import Frontmatter, frontmatter_warnings, parse_frontmatter
from fractal.workspace.capped import read_capped
from fractal.workspace.nodedir import OversizeFile, config_from_bytes, read_config

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


class _Entry:
    """A cached value, the stamp it was read under, and (while that stamp is racy) the
    bytes it was made from."""

    __slots__ = ("data", "stamp", "value")

    def __init__(self, stamp: _Stamp, value: object, data: bytes | None) -> None:
        self.stamp = stamp
        self.value = value
        self.data = data  # None: the stamp alone proves the file unchanged


def _read(path: Path) -> bytes | None:
    """The bytes of the regular file at ``path``, at most ``NODE_FILE_CAP`` + 1 (a loader
    refuses past the cap), or None (never blocks: a FIFO swapped in after the stamp was
    read is opened without waiting for a writer, and refused)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        with open(fd, "rb", closefd=False) as fh:
            if (os.fstat(fd).st_mode & 0o170000) != 0o100000:
                return None
            return fh.read(NODE_FILE_CAP + 1)
    except OSError:
        return None
    finally:
        os.close(fd)


class FileCache:
    """One process's cache of parsed files (see the module docstring); not thread-safe."""

    def __init__(self, now: Callable[[], float] = time.time) -> None:
        self._now = now  # the epoch clock file timestamps are compared with
        self._entries: dict[tuple[Path, object], _Entry] = {}

    def get(self, path: Path, load: Callable[[Path, bytes | None], T]) -> T:
        """``load(path, data)`` for the file's bytes now, or its earlier value while the file
        is unchanged (``data`` None: the file could not be read here; ``load`` reads it and
        reports why not). Raises what ``load`` raises."""
        key = (path, load)
        before = _stamp(path)
        held = self._entries.get(key)
        if before is not None and held is not None and held.stamp == before[0]:
            if held.data is None:
                return held.value  # type: ignore[return-value]
            data = _read(path)
            if data == held.data:  # racy, but the same bytes: the same value
                if self._now() - before[1] >= RACY_S:
                    held.data = None  # settled: the stamp alone answers from now on
                return held.value  # type: ignore[return-value]
        else:
            data = _read(path) if before is not None else None
        self._entries.pop(key, None)
        value = load(path, data)
        after = _stamp(path)
        if data is not None and before is not None and after is not None \
                and after[0] == before[0]:
            racy = self._now() - after[1] < RACY_S
            self._entries[key] = _Entry(after[0], value, data if racy else None)
        return value


FILES = FileCache()
"""The supervisor's cache of its node's live files (``config.json``, the step files)."""


def live_config(path: Path, data: bytes | None = None) -> NodeConfig:
    """``config.json`` at ``path`` (its bytes ``data``, or read here when None) read and
    checked. Raises FractalError, OSError."""
    raw = read_config(path) if data is None else config_from_bytes(path, data)
    return parse_config(raw, source=str(path))


def parse_step_file(path: Path, data: bytes | None = None) -> tuple[Frontmatter, tuple[str, ...]]:
    """A step file's (bytes ``data``, or read here when None) parsed frontmatter and the
    likely mistakes in it. Raises OversizeFile past ``NODE_FILE_CAP`` bytes, OSError,
    UnicodeDecodeError (not UTF-8)."""
    if data is None:
        data = read_capped(path, NODE_FILE_CAP)
    if len(data) > NODE_FILE_CAP:
        raise OversizeFile(over_cap(f"step file {path.name}", NODE_FILE_CAP))
    text = data.decode("utf-8")
    return parse_frontmatter(text), tuple(frontmatter_warnings(text))
