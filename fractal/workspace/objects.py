"""Whether an object id names a sound commit, as far as the loose object files tell.

``git.branch_tip`` and ``git.branch_exists`` answer from a loose ref file without a git
process (a loop asks before every step), but a ref file may hold the id of an annotated
tag (``rev-parse branch^{commit}`` peels it), of an object that is missing (``show-ref``
says no such branch) or of a corrupt one (git refuses it). ``commit_known`` answers from
what this process already knows and from the loose object file alone, which is where a
fresh commit (the backstop's, the agent's) sits: it inflates that file, reads its type,
and for a commit checks that its bytes hash to the id and that its header is one git
parses. Anything else (a packed object, alternates, replace refs) is None: the caller
asks git once and ``remember``\\ s a commit. Packs are never parsed here: git reads them.
A first loose look costs about 20 us, a known commit one ``stat``; a git process 2-5 ms.
"""

from __future__ import annotations

import os
import re
import zlib
from pathlib import Path

__all__ = ["commit_known", "remember"]

_MAX_COMMIT = 1 << 20  # bytes: a larger loose object is asked of git (no commit is)
_HEADER = re.compile(rb"tree [0-9a-f]{40,64}\n(parent [0-9a-f]{40,64}\n)*")


def commit_known(common: Path, sha: str) -> bool | None:
    """Whether ``sha`` (40 or 64 lowercase hex) is a commit git would take, from the
    object store under the common dir ``common``: True when this process knows it (an
    earlier loose read, while that file is still there, or ``remember``) or its loose
    file inflates to a commit whose bytes hash to ``sha`` with a ``tree <id>`` then
    ``parent <id>`` header; False when its loose file shows otherwise (a tag, a tree, a
    blob, a corrupt or bogus commit); None when the files cannot tell (no loose file:
    packed, missing or in an alternate store; ``GIT_OBJECT_DIRECTORY``; replace refs,
    which make git read another object in its place): ask git. Never raises."""
    base = str(common)
    if os.environ.get("GIT_OBJECT_DIRECTORY") or os.environ.get("GIT_REPLACE_REF_BASE") \
            or _may_replace(base):
        return None
    key = (base, sha)
    known = _KNOWN.get(key)
    if known is not None and (not known or os.path.exists(known)):
        return True
    _KNOWN.pop(key, None)  # its loose file went (packed, or removed): look again
    path = os.path.join(base, "objects", sha[:2], sha[2:])
    try:
        with open(path, "rb") as handle:
            raw = handle.read(_MAX_COMMIT + 1)
    except FileNotFoundError:
        return None
    except OSError:
        return False  # there, unreadable: git fails on it too (and is asked again)
    if not _sound(raw, sha):
        return False
    _keep(key, path)
    return True


def remember(common: Path, sha: str) -> None:
    """Record that git said ``sha`` is a commit of the repository at ``common`` (objects
    never change, and a branch tip is reachable, so gc never prunes it)."""
    _keep((str(common), sha), "")


_KNOWN: dict[tuple[str, str], str] = {}  # (common dir, id) -> its loose file, "" from git
_KEEP = 4096  # ids remembered, then forgotten all at once


def _keep(key: tuple[str, str], path: str) -> None:
    if len(_KNOWN) >= _KEEP:
        _KNOWN.clear()
    _KNOWN[key] = path


def _sound(raw: bytes, sha: str) -> bool:
    """True when the loose object bytes ``raw`` inflate to a whole commit that hashes to
    ``sha`` and whose header git parses."""
    inflater = zlib.decompressobj()
    try:
        data = inflater.decompress(raw, _MAX_COMMIT + 64)
    except zlib.error:
        return False
    head, nul, body = data.partition(b"\0")
    if not (nul and inflater.eof and head.startswith(b"commit ")):
        return False
    if head[len(b"commit "):] != str(len(body)).encode():
        return False
    return _hex_digest(data, len(sha)) == sha and _HEADER.match(body) is not None


def _may_replace(common: str) -> bool:
    """True when the repository may hold replace refs (``git replace``): a
    ``refs/replace`` directory, or a ``packed-refs`` naming one (that file's answer is
    kept while its inode, size and mtime hold)."""
    if os.path.isdir(os.path.join(common, "refs", "replace")):
        return True
    packed = os.path.join(common, "packed-refs")
    try:
        st = os.stat(packed)
    except OSError:
        return False
    identity = (st.st_ino, st.st_size, st.st_mtime_ns)
    known = _PACKED_REPLACE.get(packed)
    if known is not None and known[0] == identity:
        return known[1]
    try:
        with open(packed, "rb") as handle:
            found = b" refs/replace/" in handle.read()
    except OSError:
        return True
    _PACKED_REPLACE[packed] = (identity, found)
    return found


_PACKED_REPLACE: dict[str, tuple[tuple[int, int, int], bool]] = {}


def _hex_digest(data: bytes, hex_size: int) -> str:
    """SHA-1 (``hex_size`` 40) or SHA-256 (64) of ``data`` in hex, from CPython's built-in
    modules where there are: ``hashlib`` loads OpenSSL's library when imported, several
    milliseconds that ``fractal node kill`` (which loads this module) would pay."""
    try:
        if hex_size == 40:
            # deferred: start-up cost (1 module)
            from _sha1 import sha1 as algo  # type: ignore[import-not-found]  # no stub
        else:
            # deferred: start-up cost (1 module)
            from _sha256 import sha256 as algo  # type: ignore[import-not-found]  # (3.11)
    except ImportError:
        import hashlib  # deferred: start-up cost (3 modules)

        algo = hashlib.sha1 if hex_size == 40 else hashlib.sha256
    return str(algo(data).hexdigest())
