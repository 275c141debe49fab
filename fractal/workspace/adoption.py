"""Adoption: a node's private git objects moved into the repository's shared store, each
one checked first.

Inside the sandbox the shared ``<repo>/.git/objects`` is read-only and the agent's git
writes every new object into the node's private object directory
(``domain.sandbox.private_objects``). The supervisor, outside the sandbox, adopts them:

- a loose object is inflated and hashed here (no git process): it enters the shared
  store, as the same compressed bytes under the same name, only when its bytes inflate
  to a ``<type> <size>\\0`` header of a git object type, exactly ``size`` bytes follow
  (nothing after the stream) and the whole hashes to its file name; else it is refused;
- a pack (``pack/pack-*.pack`` with its ``.idx``, as a ``git gc`` or ``repack`` inside
  the sandbox leaves) is fed to ``git index-pack --stdin --fix-thin`` run in the shared
  store, which recomputes every object's id from its bytes: a pack git cannot index is
  refused whole, and its objects never enter under a name they do not hash to.

Nothing is followed through a symlink, nothing but a regular file is read (a FIFO never
blocks) and a file larger than ``MAX_OBJECT`` bytes is refused. ``drain=True`` (once the
launch has ended: no process of it is left) then empties the private dir, refused files
included; ``drain=False`` (a snapshot while the launch lives, before a relayed command)
copies and leaves every file where it is. A private dir that holds nothing costs one
``os.scandir`` and no git process.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import subprocess
import zlib
from contextlib import suppress
from pathlib import Path
from typing import NamedTuple

from fractal.workspace.capped import read_capped
from fractal.workspace.git import git_env, run_git

__all__ = ["MAX_OBJECT", "RECENT_TIPS", "Adoption", "adopt", "check_loose", "last_whole",
           "reads_whole", "set_back"]

MAX_OBJECT = 256 << 20
"""Bytes of one loose object file or pack adopted (256 MiB); a larger one is refused."""

_TYPES = (b"blob", b"tree", b"commit", b"tag")
_HEX = frozenset("0123456789abcdef")
_CHUNK = 1 << 16
_SHARED_ONLY = {"GIT_ALTERNATE_OBJECT_DIRECTORIES": ""}  # not even an inherited alternate


class Adoption(NamedTuple):
    """What one adoption did: ``adopted`` objects (loose) and packs that entered the
    shared store or were there already, and ``refused``, one text per file that did not
    (``<path>: <why>``)."""

    adopted: int
    refused: tuple[str, ...]


def adopt(private: Path, common: Path, *, drain: bool) -> Adoption:
    """Adopt the objects of ``private`` into ``<common>/objects`` (the module docstring
    gives the rule); with ``drain`` empty ``private`` afterwards. Never raises for what
    the agent left: a file that cannot be read or checked is refused; an OSError writing
    the shared store propagates (nothing of that object is left half-written)."""
    try:
        entries = list(os.scandir(private))
    except (FileNotFoundError, NotADirectoryError):
        return Adoption(0, ())
    if not entries:
        return Adoption(0, ())
    if not stat.S_ISDIR(os.lstat(private).st_mode):
        return Adoption(0, ())  # a symlink in the private dir's place: never followed
    shared = common / "objects"
    adopted, refused = 0, []
    packs: list[os.DirEntry[str]] = []
    for entry in entries:
        if len(entry.name) == 2 and set(entry.name) <= _HEX \
                and entry.is_dir(follow_symlinks=False):
            count, bad = _adopt_loose_dir(Path(entry.path), shared, drain=drain)
            adopted += count
            refused += bad
        elif entry.name == "pack" and entry.is_dir(follow_symlinks=False):
            packs.append(entry)
    for entry in packs:
        count, bad = _adopt_packs(Path(entry.path), common)
        adopted += count
        refused += bad
    if drain:
        _empty(private, entries)
    return Adoption(adopted, tuple(refused))


def _adopt_loose_dir(folder: Path, shared: Path, *, drain: bool) -> tuple[int, list[str]]:
    adopted, refused = 0, []
    for entry in os.scandir(folder):
        name = entry.name
        if name.startswith("tmp_obj_") or not set(name) <= _HEX:
            continue  # git's own temporary file, or no object: never adopted
        sha = folder.name + name
        why = _adopt_one(Path(entry.path), sha, shared)
        if why:
            refused.append(f"{entry.path}: {why}")
        else:
            adopted += 1
    return adopted, refused


def _read_regular(path: Path, limit: int) -> bytes | str:
    """The bytes of ``path``, or why they are not read: a symlink, not a regular file,
    larger than ``limit``, unreadable."""
    try:
        data = read_capped(path, limit, follow=False)
    except OSError as exc:
        if exc.errno == errno.EINVAL:
            return "not a regular file"
        return f"cannot be read ({exc.strerror or exc})"
    return data if len(data) <= limit else f"larger than {limit} bytes"


def _adopt_one(path: Path, sha: str, shared: Path) -> str:
    """Copy the loose object at ``path`` into ``shared`` when it checks out; returns ""
    or why it was refused."""
    if len(sha) not in (40, 64):
        return "not an object id"
    raw = _read_regular(path, MAX_OBJECT)
    if isinstance(raw, str):
        return raw
    why = check_loose(raw, sha)
    if why:
        return why
    target = shared / sha[:2] / sha[2:]
    if os.path.lexists(target):
        return ""  # git keeps the object it has: the same id is the same bytes
    target.parent.mkdir(mode=0o755, exist_ok=True)
    temp = target.parent / f"tmp_adopt_{os.getpid()}_{sha[2:12]}"
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
        with os.fdopen(fd, "wb") as out:
            out.write(raw)  # no fsync: git's own default for a loose object
        with suppress(FileExistsError):  # never replaces an object another writer put
            os.link(temp, target)
    finally:
        with suppress(OSError):
            os.unlink(temp)
    return ""


def check_loose(raw: bytes, sha: str) -> str:
    """Why the loose object file bytes ``raw`` are not the object ``sha`` (40 hex: SHA-1,
    64: SHA-256), or "" when they are: they inflate (zlib, nothing after the stream) to
    ``<blob|tree|commit|tag> <size>\\0`` and exactly ``size`` bytes, and the whole hashes
    to ``sha``."""
    import hashlib  # deferred: start-up cost (OpenSSL; most adoptions find nothing)

    digest = hashlib.sha1() if len(sha) == 40 else hashlib.sha256()
    inflater = zlib.decompressobj()
    header = b""
    body = 0
    size = -1
    try:
        for at in range(0, max(len(raw), 1), _CHUNK):
            out = inflater.decompress(raw[at:at + _CHUNK])
            digest.update(out)
            if size < 0:
                header += out
                end = header.find(b"\0")
                if end < 0:
                    if len(header) > 64:
                        return "no object header"
                    continue
                kind, _, length = header[:end].partition(b" ")
                if kind not in _TYPES or not length.isdigit() or len(length) > 20:
                    return "no object header"
                size = int(length)
                body = len(header) - end - 1
            else:
                body += len(out)
            if body > size >= 0:
                return "longer than its header says"
        tail = inflater.flush()
        digest.update(tail)
        body += len(tail)
    except zlib.error:
        return "not a zlib stream"
    if not inflater.eof or inflater.unused_data:
        return "a cut or padded zlib stream"
    if size < 0 or body != size:
        return "its length is not the header's"
    if digest.hexdigest() != sha:
        return "its content does not hash to its name"
    return ""


def _adopt_packs(folder: Path, common: Path) -> tuple[int, list[str]]:
    """Index every complete pack of ``folder`` (its ``.idx`` beside it: git renames the
    ``.pack`` in first) into the shared store."""
    adopted, refused = 0, []
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        if not (entry.name.startswith("pack-") and entry.name.endswith(".pack")):
            continue
        if not os.path.lexists(entry.path[:-len(".pack")] + ".idx"):
            continue  # still being written
        why = _index_pack(Path(entry.path), common)
        if why:
            refused.append(f"{entry.path}: {why}")
            continue
        adopted += 1
    return adopted, refused


def _index_pack(path: Path, common: Path) -> str:
    """Run ``git index-pack --stdin --fix-thin`` in ``common`` on the pack at ``path``;
    returns "" or why it was refused."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return "not a regular file"
        if info.st_size > MAX_OBJECT:
            return f"larger than {MAX_OBJECT} bytes"
        packs = common / "objects" / "pack"
        before = set(os.listdir(packs)) if packs.is_dir() else set()
        proc = subprocess.run(["git", "-C", str(common), "index-pack", "--stdin",
                               "--fix-thin"], stdin=fd, capture_output=True, check=False,
                              env=git_env(None, common))
    except OSError as exc:
        return f"cannot be indexed ({exc.strerror or exc})"
    finally:
        os.close(fd)
    if proc.returncode != 0:
        for name in set(os.listdir(packs)) - before if packs.is_dir() else ():
            if name.startswith("tmp_"):  # what index-pack left of the refused bytes
                with suppress(OSError):
                    os.unlink(packs / name)
        detail = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        return f"git index-pack refused it ({detail[-1] if detail else proc.returncode})"
    return ""


def _empty(private: Path, entries: list[os.DirEntry[str]]) -> None:
    """Remove everything under ``private`` (the dir itself stays): a symlink is removed
    as a link, never followed."""
    for entry in entries:
        with suppress(OSError):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)


def reads_whole(common: Path, rev: str, *, besides: str | None = None) -> bool:
    """Whether every commit, tree and blob reachable from ``rev`` (but not from
    ``besides``) is in the shared store under ``common`` alone, no private object dir
    read: ``git rev-list --objects --quiet``, which fails on a missing object. Every
    object there was written by git or checked by adoption, so a whole closure holds only
    objects that hash to their names."""
    probe = run_git(["rev-list", "--objects", "--quiet", rev,
                     *(["--not", besides] if besides else [])], common, check=False,
                    env=_SHARED_ONLY)
    return probe.returncode == 0


RECENT_TIPS = 50
"""Most reflog entries of a branch ``last_whole`` tries (newest first)."""


def last_whole(common: Path, branch: str) -> str | None:
    """The newest commit the reflog of ``refs/heads/<branch>`` names (its file under
    ``<common>/logs``, at most RECENT_TIPS entries) that reads whole from the shared store
    (``reads_whole``), or None. The reflog is only a list of candidates: whatever it
    says, the commit returned is whole."""
    try:
        text = (common / "logs" / "refs" / "heads" / branch).read_text(
            encoding="ascii", errors="replace")
    except OSError:
        return None
    seen: set[str] = set()
    for line in reversed(text.splitlines()[-RECENT_TIPS * 4:]):
        fields = line.split(" ", 2)
        sha = fields[1] if len(fields) > 2 else ""
        if len(sha) not in (40, 64) or not set(sha) <= _HEX or set(sha) == {"0"} \
                or sha in seen:
            continue
        seen.add(sha)
        if reads_whole(common, sha):
            return sha
        if len(seen) >= RECENT_TIPS:
            break
    return None


def set_back(worktree: Path, common: Path, branch: str, good: str | None) -> str:
    """After an adoption refused objects: when the branch ``branch`` checked out in
    ``worktree`` no longer reads whole from the shared store under ``common`` (a commit,
    tree or blob it needs is missing), reset it and the worktree's index to ``good`` (its
    tip before the launch), or without one to its last whole commit (``last_whole``: a
    supervisor's start after a crash mid-launch); the files on disk stay, for the next
    commit to take again. Returns what was done ("" when the branch reads whole). Raises
    GitError when git refuses the reset."""
    if reads_whole(common, f"refs/heads/{branch}", besides=good):
        return ""
    why = "its tip before the launch"
    if not good:
        good, why = last_whole(common, branch), "its last whole commit in its reflog"
    if not good:
        return (f"refs/heads/{branch} needs objects the shared store refused, and its "
                "reflog names no whole commit; set it to a good commit (`git reset "
                "--mixed SHA` in its worktree) and commit the worktree again")
    run_git(["reset", "--quiet", "--mixed", good], worktree, env=_SHARED_ONLY)
    return (f"refs/heads/{branch} needed objects the shared store refused: set back to "
            f"{good[:10]} ({why}); the worktree keeps the files")
