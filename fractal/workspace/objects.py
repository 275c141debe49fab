"""Whether an object id names a sound commit, read from the object store's files.

``git.branch_tip`` and ``git.branch_exists`` answer from a loose ref file without a git
process (a loop asks before every step), but a ref file may hold the id of an annotated
tag (``rev-parse branch^{commit}`` peels it), of an object that is missing (``show-ref``
says no such branch) or of a corrupt one (git refuses it). ``is_sound_commit`` says yes
only when the files show what git itself would accept: the object, loose or a whole
(undeltified) entry of a local pack, inflates to a ``commit`` whose content hashes to
the id and whose header git can parse. Every other case answers no, and the caller asks
git, so the answer can be slower but never different. A first look costs 20-250 us (a
loose object; a packed one at the end of a long delta chain), a repeated one a ``stat``
(about 7 us); a git process costs 2-5 ms.
"""

from __future__ import annotations

import mmap
import os
import re
import struct
import zlib
from pathlib import Path
from typing import BinaryIO

__all__ = ["is_sound_commit"]

_MAX_COMMIT = 1 << 20  # bytes: a larger commit is asked of git (none is this large)
_HEADER = re.compile(rb"tree [0-9a-f]{40,64}\n(parent [0-9a-f]{40,64}\n)*")
_PACK_COMMIT = 1  # the type bits of a pack entry (or a delta's base) holding a commit


def is_sound_commit(common: Path, sha: str) -> bool:
    """True when ``common``/objects holds ``sha`` (40 or 64 lowercase hex) as a commit git
    would take: found loose or in a local pack (a delta resolved against bases in that
    pack), its bytes hash to ``sha`` and its header reads ``tree <id>`` then ``parent
    <id>`` lines. False when the files cannot tell that (an alternate object store,
    ``GIT_OBJECT_DIRECTORY``, a base in another pack, replace refs, which make git read
    another object in its place) or tell otherwise (a tag, a missing or corrupt object). A yes is kept while the file that held the object has the same
    inode, size and mtime (one ``stat`` then, not a read: a loop asks before every step).
    Never raises for what it reads."""
    if os.environ.get("GIT_OBJECT_DIRECTORY") or os.environ.get("GIT_REPLACE_REF_BASE") \
            or _may_replace(str(common)):
        return False
    objects = os.path.join(common, "objects")
    key = (objects, sha)
    known = _SOUND.get(key)
    if known is not None and _identity(known[0]) == known[1]:
        return True
    try:
        found = _loose(objects, sha) or _packed(objects, sha)
    except (OSError, ValueError, zlib.error, struct.error, IndexError):
        return False
    if found is None:
        return False
    body, where, identity = found
    data = b"commit %d\0" % len(body) + body
    if _hex_digest(data, len(sha)) != sha or _HEADER.match(body) is None:
        return False
    if len(_SOUND) >= _KEEP:
        _SOUND.clear()
    _SOUND[key] = (where, identity)
    return True


def _may_replace(common: str) -> bool:
    """True when the repository may hold replace refs (``git replace``): a
    ``refs/replace`` directory, or a ``packed-refs`` naming one (that file's answer is
    kept while its inode, size and mtime hold)."""
    if os.path.isdir(os.path.join(common, "refs", "replace")):
        return True
    packed = os.path.join(common, "packed-refs")
    identity = _identity(packed)
    if identity is None:
        return False
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
            from _sha1 import sha1 as algo  # type: ignore[import-not-found]  # no stub
        else:
            from _sha256 import sha256 as algo  # type: ignore[import-not-found]  # (3.11)
    except ImportError:
        import hashlib

        algo = hashlib.sha1 if hex_size == 40 else hashlib.sha256
    return str(algo(data).hexdigest())


_SOUND: dict[tuple[str, str], tuple[str, tuple[int, int, int]]] = {}
_KEEP = 4096  # commits remembered as sound, then forgotten all at once


def _identity(path: str) -> tuple[int, int, int] | None:
    """(inode, size, mtime in ns) of ``path``, None when it is gone."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


_Found = tuple[bytes, str, tuple[int, int, int]]  # (commit body, file read, its identity)


def _loose(objects: str, sha: str) -> _Found | None:
    """The commit body of the loose object ``sha``, None when there is no such file;
    raises ValueError when the file holds no commit (or a truncated one)."""
    path = os.path.join(objects, sha[:2], sha[2:])
    try:
        with open(path, "rb") as handle:
            st = os.fstat(handle.fileno())
            raw = handle.read()
    except FileNotFoundError:
        return None
    inflater = zlib.decompressobj()
    data = inflater.decompress(raw, _MAX_COMMIT + 64)
    head, nul, body = data.partition(b"\0")
    if not nul or not head.startswith(b"commit ") or not inflater.eof \
            or len(body) != int(head[len(b"commit "):]):
        raise ValueError(f"{sha} is no whole commit")
    return body, path, (st.st_ino, st.st_size, st.st_mtime_ns)


def _packed(objects: str, sha: str) -> _Found | None:
    """The commit body of ``sha`` from a local pack (a delta resolved against its
    bases in the same pack); None when no pack's index lists it, a base is not in that
    pack, or the object is no commit."""
    pack_dir = os.path.join(objects, "pack")
    try:
        names = os.listdir(pack_dir)
    except FileNotFoundError:
        return None
    want = bytes.fromhex(sha)
    for name in names:
        if not name.endswith(".idx"):
            continue
        with open(os.path.join(pack_dir, name), "rb") as index, \
                mmap.mmap(index.fileno(), 0, access=mmap.ACCESS_READ) as view:
            offset = _index_offset(view, want)
            if offset is None:
                continue
            path = os.path.join(pack_dir, name[:-len(".idx")] + ".pack")
            with open(path, "rb") as pack:
                st = os.fstat(pack.fileno())
                kind, body = _entry(pack, view, offset, _MAX_CHAIN, len(want))
            if kind != _PACK_COMMIT:
                return None
            return body, path, (st.st_ino, st.st_size, st.st_mtime_ns)
    return None


_MAX_CHAIN = 64  # links: git's deepest default delta chain is 50 (repack --depth)
_OFS_DELTA, _REF_DELTA = 6, 7


def _index_offset(view: mmap.mmap, want: bytes) -> int | None:
    """Where ``want`` (raw id bytes) starts in the pack of the version-2 index ``view``,
    or None when the index does not list it. Raises ValueError for another version."""
    if view[:8] != b"\377tOc\0\0\0\2":
        raise ValueError("not a version-2 pack index")
    size = len(want)
    first = want[0]
    low = struct.unpack_from(">I", view, 8 + 4 * (first - 1))[0] if first else 0
    high = struct.unpack_from(">I", view, 8 + 4 * first)[0]
    count = struct.unpack_from(">I", view, 8 + 4 * 255)[0]
    names = 8 + 1024
    while low < high:
        mid = (low + high) // 2
        found = view[names + mid * size:names + (mid + 1) * size]
        if found == want:
            break
        low, high = (mid + 1, high) if found < want else (low, mid)
    else:
        return None
    offsets = names + count * size + count * 4  # past the names and the CRCs
    offset: int = struct.unpack_from(">I", view, offsets + 4 * mid)[0]
    if offset & 0x80000000:  # an index into the 64-bit offset table
        large = offsets + count * 4 + 8 * (offset & 0x7FFFFFFF)
        offset = struct.unpack_from(">Q", view, large)[0]
    return offset


def _entry(pack: BinaryIO, view: mmap.mmap, offset: int, links: int,
           id_size: int) -> tuple[int, bytes]:
    """(type, content) of the pack entry at ``offset``, a delta applied to its base
    (found by offset, or by its ``id_size``-byte id in the same index ``view``) at most
    ``links`` deep.
    Raises ValueError for what cannot be read so (a base elsewhere, a chain too deep)."""
    pack.seek(offset)
    byte = pack.read(1)[0]
    kind, size, shift = (byte >> 4) & 7, byte & 15, 4
    while byte & 0x80:
        byte = pack.read(1)[0]
        size |= (byte & 0x7F) << shift
        shift += 7
    if kind not in (_OFS_DELTA, _REF_DELTA):
        return kind, _inflate(pack, size)
    if links <= 0:
        raise ValueError("delta chain too deep")
    if kind == _OFS_DELTA:
        byte = pack.read(1)[0]
        back = byte & 0x7F
        while byte & 0x80:
            byte = pack.read(1)[0]
            back = ((back + 1) << 7) | (byte & 0x7F)
        base = offset - back
    else:
        found = _index_offset(view, pack.read(id_size))
        if found is None:
            raise ValueError("delta base not in this pack")
        base = found
    delta = _inflate(pack, size)
    base_kind, source = _entry(pack, view, base, links - 1, id_size)
    return base_kind, _apply_delta(source, delta)


def _inflate(pack: BinaryIO, size: int) -> bytes:
    """Exactly ``size`` bytes inflated from ``pack``'s position. Raises ValueError when
    the stream holds more or fewer, or ``size`` is past ``_MAX_COMMIT``."""
    if size > _MAX_COMMIT:
        raise ValueError("object too large to read here")
    inflater = zlib.decompressobj()
    body = b""
    while not inflater.eof and len(body) <= size:
        chunk = pack.read(4096)
        if not chunk:
            break
        body += inflater.decompress(chunk, size + 1 - len(body))
    if not inflater.eof or len(body) != size:
        raise ValueError("pack entry of the wrong size")
    return body


def _apply_delta(source: bytes, delta: bytes) -> bytes:
    """``source`` rebuilt by git's delta instructions ``delta`` (copy and insert).
    Raises ValueError when the delta does not fit ``source``."""
    pos = 0

    def varint() -> int:
        nonlocal pos
        value, shift = 0, 0
        while True:
            byte = delta[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    if varint() != len(source):
        raise ValueError("delta for another base")
    size = varint()
    out = bytearray()
    while pos < len(delta):
        op = delta[pos]
        pos += 1
        if op & 0x80:
            start = length = 0
            for bit in range(4):
                if op & (1 << bit):
                    start |= delta[pos] << (8 * bit)
                    pos += 1
            for bit in range(3):
                if op & (0x10 << bit):
                    length |= delta[pos] << (8 * bit)
                    pos += 1
            length = length or 0x10000
            if start + length > len(source):
                raise ValueError("delta copies past its base")
            out += source[start:start + length]
        elif op:
            out += delta[pos:pos + op]
            pos += op
        else:
            raise ValueError("reserved delta opcode")
    if len(out) != size:
        raise ValueError("delta rebuilt the wrong size")
    return bytes(out)
