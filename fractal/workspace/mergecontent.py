"""What a squash would carry up that must not arrive unnoticed: conflict markers the
child's work adds, and gitlinks (nested repositories committed as bare pointers).

``plan_content`` compares the files a planned squash changes (``SquashPlan.files``)
between the target's tip and the squash's tree. A merge that git resolved cleanly can
still carry conflict-marker lines: ones a node committed itself (a hand-back concluded
with ``git commit --no-edit`` before the files were edited). Those are markers the
target's version lacks (``domain.merge.conflicts.adds_conflict_markers``), so markers the target
held already never count. A gitlink (mode 160000) the squash adds carries none of its
files. ``fractal node merge`` refuses either unless ``--force``.

Three git processes, only for a merge that changes files: one ``diff-tree`` for the
modes and blob ids, one ``cat-file --batch-check`` for the sizes, one ``cat-file
--batch`` for the contents of text files up to ``READ_CAP`` bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from fractal.domain.merge.conflicts import adds_conflict_markers
from fractal.workspace.git import run_git, run_git_bytes

__all__ = ["READ_CAP", "SquashContent", "plan_content"]

READ_CAP = 16 * 1024 * 1024
"""Bytes of a file version read for markers; a larger file is not scanned."""
_GITLINK = "160000"
_BLOB_MODES = ("100644", "100755")


@dataclass(frozen=True)
class SquashContent:
    """The changed paths whose new content adds conflict ``markers``, and the ``gitlinks``
    the squash would add or change."""

    markers: tuple[str, ...] = ()
    gitlinks: tuple[str, ...] = ()


def plan_content(repo: Path, target_sha: str, tree: str, files: Sequence[str]) -> SquashContent:
    """Check the ``files`` that change from commit ``target_sha`` to ``tree`` (see the
    module docstring). Raises GitError."""
    wanted = set(files)
    if not wanted:
        return SquashContent()
    out = run_git(["diff-tree", "-r", "-z", "--no-renames", target_sha, tree], repo).stdout
    fields = out.split("\0")
    pairs: list[tuple[str, str | None, str]] = []  # (path, old blob or None, new blob)
    gitlinks: list[str] = []
    for meta, path in zip(fields[0::2], fields[1::2], strict=False):
        parts = meta.lstrip(":").split()
        if len(parts) < 5 or path not in wanted:
            continue
        old_mode, new_mode, old_sha, new_sha = parts[:4]
        if new_mode == _GITLINK:
            gitlinks.append(path)
        elif new_mode in _BLOB_MODES:
            pairs.append((path, old_sha if old_mode in _BLOB_MODES else None, new_sha))
    markers: list[str] = []
    if pairs:
        blobs = _read_blobs(repo, {s for _, old, new in pairs for s in (old, new) if s})
        for path, old, new in pairs:
            data = blobs.get(new)
            if data is not None and adds_conflict_markers(blobs.get(old) if old else None,
                                                          data):
                markers.append(path)
    return SquashContent(tuple(markers), tuple(gitlinks))


def _batch(repo: Path, option: str, shas: Sequence[str]) -> bytes:
    return run_git_bytes(["cat-file", option], repo,
                         stdin="".join(f"{s}\n" for s in shas).encode())


def _read_blobs(repo: Path, shas: set[str]) -> dict[str, bytes]:
    """The contents of the blobs ``shas`` of at most READ_CAP bytes."""
    small: list[str] = []
    for line in _batch(repo, "--batch-check", sorted(shas)).decode().splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] == "blob" and int(parts[2]) <= READ_CAP:
            small.append(parts[0])
    if not small:
        return {}
    out = _batch(repo, "--batch", small)
    found: dict[str, bytes] = {}
    at = 0
    while at < len(out):
        end = out.index(b"\n", at)
        sha, _kind, size = out[at:end].decode().split()
        start = end + 1
        found[sha] = out[start:start + int(size)]
        at = start + int(size) + 1
    return found
