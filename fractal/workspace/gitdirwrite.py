"""Writing files into a worktree's own git dir (``.git/worktrees/<branch>/``), which the
node's agent can write to from inside its sandbox, without ever following a link it left.

An agent can plant a symbolic link at any name in its git dir (``MERGE_HEAD``, an index
copy). fractal runs as you, so a write that follows one would overwrite whatever file
the link names. The rule here: a file fractal writes into a git dir is made under a new
random name with ``O_CREAT|O_EXCL|O_NOFOLLOW`` and renamed over its place (a rename
replaces a link, never writes through it); a file fractal reads there to copy it is
opened with ``O_NOFOLLOW`` and must be a regular file.

Git itself writes some of these files by opening them, following a link: ``MERGE_HEAD``,
``MERGE_MSG`` and ``MERGE_MODE`` of a ``git merge``, and every reflog line it appends (the
worktree's ``logs/HEAD``, the node's own ``logs/refs/heads/<branch>``), so ``git commit``
or ``git merge`` run as you would append to whatever file a link there names.
``drop_planted_links`` removes every symbolic link in those places before each git fractal
runs (``gitguard.guard_env``): git never makes one there itself.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

__all__ = ["copy_regular", "drop_planted_links", "replace_file"]

_CHUNK = 1 << 20
"""Bytes read per call when copying (1 MiB)."""


def replace_file(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Put ``data`` at ``path`` as a new regular file (permission bits ``mode``): written
    under a fresh random name in the same directory, then renamed over ``path``, so a
    symbolic link, FIFO or file already at ``path`` is replaced, never written through.
    Raises OSError (a directory at ``path``, a directory that cannot be written); the
    temporary file is gone either way."""
    temp = path.with_name(f".{path.name}.fractal-{os.urandom(6).hex()}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 mode)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def copy_regular(src: Path, dst: Path) -> None:
    """Copy the regular file ``src`` to ``dst``, which must not exist yet. ``src`` is
    opened without following a link (OSError ELOOP for one) and must be a regular file
    (OSError otherwise: a FIFO would hang the read); ``dst`` is created with
    ``O_EXCL|O_NOFOLLOW`` (FileExistsError for anything there, a link included)."""
    fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as inp:
        info = os.fstat(inp.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"{src} is not a regular file")
        out_fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, stat.S_IMODE(info.st_mode))
        with os.fdopen(out_fd, "wb") as out:
            while chunk := inp.read(_CHUNK):
                out.write(chunk)


_GIT_WRITES = frozenset({"MERGE_HEAD", "MERGE_MSG", "MERGE_MODE", "ORIG_HEAD", "SQUASH_MSG",
                        "AUTO_MERGE", "FETCH_HEAD", "COMMIT_EDITMSG", "CHERRY_PICK_HEAD",
                        "REVERT_HEAD", "BISECT_LOG"})
"""Files git writes at the top of a git dir by opening them. (fractal's own
``fractal-commit.lock`` is opened with ``O_NOFOLLOW``: a link there is a clear error.)"""


def drop_planted_links(git_dir: Path, common: Path) -> list[Path]:
    """Remove every symbolic link git would write through: at each of ``_GIT_WRITES`` in
    ``git_dir`` (a worktree's own git dir, or the common dir of the main checkout) and
    anywhere under ``git_dir/logs/`` and ``common/logs/refs/heads/`` (the reflogs a
    sandbox can write). Returns what was removed. Directory reads only (the entry types
    come with them), no git process; an unreadable directory is skipped, a link gone
    meanwhile too (never raises)."""
    removed: list[str] = []
    _sweep(str(git_dir), removed, _GIT_WRITES, deep=False)
    _sweep(os.path.join(git_dir, "logs"), removed, None, deep=True)
    if common != git_dir:
        _sweep(os.path.join(common, "logs", "refs", "heads"), removed, None, deep=True)
    return [Path(p) for p in removed]


def _sweep(folder: str, removed: list[str], names: frozenset[str] | None, *,
           deep: bool, at: int | None = None) -> None:
    """Unlink the links in ``folder`` (those among ``names`` when given), and with
    ``deep`` in every real directory below it. ``folder`` itself (relative to the
    directory ``at`` when given) is opened without following a link: a link there is
    removed, never entered or listed through, and every name below is unlinked or opened
    relative to its directory's descriptor, so a link swapped in meanwhile is never
    followed either."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(folder, flags, dir_fd=at)
    except OSError as exc:
        # a link in a directory's place (ELOOP, or ENOTDIR with O_DIRECTORY): removed,
        # never entered
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            with contextlib.suppress(OSError):
                if stat.S_ISLNK(os.lstat(folder, dir_fd=at).st_mode):
                    os.unlink(folder, dir_fd=at)
                    removed.append(folder if at is None else f"{_named(at)}/{folder}")
        return
    try:
        with os.scandir(fd) as listing:
            entries = list(listing)
        for entry in entries:
            if names is not None and entry.name not in names:
                continue
            try:
                if entry.is_symlink():
                    os.unlink(entry.name, dir_fd=fd)
                    removed.append(f"{_named(fd)}/{entry.name}")
                elif deep and entry.is_dir(follow_symlinks=False):
                    _sweep(entry.name, removed, None, deep=True, at=fd)
            except OSError:  # gone meanwhile
                continue
    except OSError:
        return
    finally:
        os.close(fd)


def _named(fd: int) -> str:
    """The path of the open directory ``fd`` (for the report of what was removed)."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return f"<fd {fd}>"
