"""A bounded read of one regular file: never more than one byte past a cap, never a wait
on a FIFO (no I/O beyond the one ``open``, ``fstat`` and the reads; a leaf module that
the git guard, the node dir and adoption all use)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["read_capped"]


def read_capped(path: Path, cap: int, *, follow: bool = True) -> bytes:
    """The bytes of the regular file ``path``, at most ``cap`` + 1 of them (a caller
    refuses past ``cap``); never blocks on a FIFO; ``follow`` False refuses a symlink
    (``ELOOP``). Raises FileNotFoundError, OSError (not a regular file: ``EINVAL``)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    fd = os.open(path, flags)
    try:
        if (os.fstat(fd).st_mode & 0o170000) != 0o100000:
            raise OSError(22, "not a regular file", str(path))
        chunks: list[bytes] = []
        left = cap + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
