"""Merge conflicts as values: conflict-marker lines, the refusal reason, merge-tree output.

Pure: text and strings in, values out. A file "holds conflict markers" when it has, in this
order, a line starting ``<<<<<<<`` followed by a space or the end of the line, a line that
is exactly ``=======``, and a line starting ``>>>>>>>`` the same way: the three lines git
writes around each conflicting hunk. A lone ``=======`` (a reStructuredText rule, a
Markdown setext heading) is not a conflict. A file whose first 8000 bytes hold a NUL is
binary and never counts (git's own binary test).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = [
    "BINARY_PROBE",
    "DIFF_LINE_CAP",
    "REASON_CAP",
    "SKIPPED",
    "ConflictPair",
    "MergeTree",
    "Operation",
    "adds_conflict_markers",
    "conflict_reason",
    "has_conflict_markers",
    "is_binary",
    "operation_reason",
    "parse_merge_tree",
    "skipped_notice",
]

BINARY_PROBE = 8000
"""Bytes looked at for a NUL to call a file binary (git's heuristic)."""
REASON_CAP = 10
"""Most paths a conflict reason names before ``... and N more``."""
_OPEN, _MIDDLE, _CLOSE = "<<<<<<<", "=======", ">>>>>>>"


class Operation(enum.Enum):
    """A multi-step git operation that can be left half done in a worktree."""

    MERGE = "merge"
    REBASE = "rebase"
    CHERRY_PICK = "cherry-pick"
    REVERT = "revert"

    @property
    def abort_hint(self) -> str:
        """The command that abandons the operation (``git merge --abort`` ...)."""
        return f"git {self.value} --abort"


def is_binary(data: bytes) -> bool:
    """Tell whether ``data`` looks binary: a NUL byte among its first BINARY_PROBE bytes."""
    return b"\0" in data[:BINARY_PROBE]


def _fence(line: str, marker: str) -> bool:
    return line.startswith(marker) and (len(line) == len(marker) or line[len(marker)] in " \t")


def has_conflict_markers(data: bytes) -> bool:
    """Tell whether the file content ``data`` holds a conflict hunk (see the module rule).

    Binary content is never a conflict. Line ends may be ``\\n`` or ``\\r\\n``.
    """
    if is_binary(data):
        return False
    expect = _OPEN
    for raw in data.decode("utf-8", errors="replace").splitlines():
        line = raw.rstrip("\r")
        if expect == _OPEN and _fence(line, _OPEN):
            expect = _MIDDLE
        elif expect == _MIDDLE and line == _MIDDLE:
            expect = _CLOSE
        elif expect == _CLOSE and _fence(line, _CLOSE):
            return True
    return False


DIFF_LINE_CAP = 20_000
"""Lines of a file past which ``adds_conflict_markers`` does not diff it against its old
version and counts every hunk as added (a line diff of huge files costs too much)."""


def _hunks(lines: Sequence[str]) -> Iterable[tuple[int, int, int]]:
    """(open, middle, close) line numbers of each conflict hunk in ``lines``."""
    expect, opened, middle = _OPEN, -1, -1
    for i, raw in enumerate(lines):
        line = raw.rstrip("\r")
        if expect == _OPEN and _fence(line, _OPEN):
            expect, opened = _MIDDLE, i
        elif expect == _MIDDLE and line == _MIDDLE:
            expect, middle = _CLOSE, i
        elif expect == _CLOSE and _fence(line, _CLOSE):
            yield opened, middle, i
            expect = _OPEN


def adds_conflict_markers(old: bytes | None, new: bytes) -> bool:
    """Tell whether ``new`` (a file's content after a commit) holds a conflict hunk with a
    fence line (``<<<<<<<``, ``=======``, ``>>>>>>>``) the commit adds: one that is not
    among the lines of ``old`` (the content before, None for a new file) as a line diff
    matches them. A hunk the file held already (a git tutorial committed earlier) does not
    count, so its later edits commit. Binary content never counts; past
    ``DIFF_LINE_CAP`` lines every hunk counts as added."""
    if is_binary(new) or not has_conflict_markers(new):
        return False
    if old is None or is_binary(old):
        return True
    new_lines = new.decode("utf-8", errors="replace").splitlines()
    old_lines = old.decode("utf-8", errors="replace").splitlines()
    if max(len(new_lines), len(old_lines)) > DIFF_LINE_CAP:
        return True
    from difflib import SequenceMatcher  # only where a file holds markers: rare

    added: set[int] = set()
    matcher = SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    for tag, _i1, _i2, j1, j2 in matcher.get_opcodes():
        if tag in ("insert", "replace"):
            added.update(range(j1, j2))
    return any(not added.isdisjoint(hunk) for hunk in _hunks(new_lines))


def _capped(paths: Sequence[str], cap: int) -> str:
    shown = ", ".join(paths[:cap])
    return shown if len(paths) <= cap else f"{shown} ... and {len(paths) - cap} more"


def conflict_reason(paths: Sequence[str], operation: Operation | None = None,
                    cap: int = REASON_CAP) -> str:
    """The reason an iteration (or commit) fails on: ``unresolved merge conflict in a, b``.

    ``paths`` are the conflicting files (unmerged entries, files with markers), at most
    ``cap`` named. With no path but an ``operation`` in progress, the reason names the
    operation instead (``unresolved merge in progress``).
    """
    unique = list(dict.fromkeys(paths))
    if unique:
        return f"unresolved merge conflict in {_capped(unique, cap)}"
    what = operation.value if operation is not None else "merge"
    return f"unresolved {what} in progress"


def operation_reason(operation: Operation) -> str:
    """What to do about a half-done ``operation`` with every conflict already resolved."""
    conclude = "git commit --no-edit" if operation in (Operation.MERGE, Operation.REVERT,
                                                       Operation.CHERRY_PICK) \
        else "git rebase --continue"
    return (f"a {operation.value} is in progress: resolve every conflict, `git add` the files "
            f"and conclude it with `{conclude}`, or abandon it with `{operation.abort_hint}`")


@dataclass(frozen=True)
class MergeTree:
    """What ``git merge-tree --write-tree`` computed: the result ``tree`` and the paths
    that conflict (empty: a clean merge)."""

    tree: str
    conflicts: tuple[str, ...] = ()

    @property
    def clean(self) -> bool:
        return not self.conflicts


def parse_merge_tree(output: str, *, ignore: Iterable[str] = ()) -> MergeTree:
    """Parse ``git merge-tree --write-tree --name-only --no-messages -z`` output.

    The output is ``<tree>\\0<path>\\0<path>\\0...``; each conflicting path appears once
    (duplicates are folded). Paths equal to or below a prefix in ``ignore`` (e.g.
    ``.fractal``) are dropped: they never travel, so their conflicts do not count.
    Raises ValueError on output with no tree id.
    """
    fields = [f for f in output.split("\0") if f != ""]
    if not fields or not fields[0].strip():
        raise ValueError("git merge-tree printed no tree id")
    prefixes = tuple(p.rstrip("/") for p in ignore)
    paths: list[str] = []
    for path in fields[1:]:
        path = path.strip("\n")
        if not path or any(path == p or path.startswith(p + "/") for p in prefixes):
            continue
        if path not in paths:
            paths.append(path)
    return MergeTree(fields[0].strip(), tuple(paths))


def parse_stages(records: Iterable[str]) -> list[tuple[str, str, str, str]]:
    """The conflicted-file records of ``git merge-tree --write-tree -z`` output (without
    ``--name-only``): each ``<mode> <sha> <stage>\\t<path>``, up to the first empty record,
    as (mode, sha, stage, path). Raises ValueError on a malformed record."""
    out: list[tuple[str, str, str, str]] = []
    for record in records:
        if not record:
            break
        meta, tab, path = record.partition("\t")
        parts = meta.split()
        if not tab or len(parts) != 3 or parts[2] not in ("1", "2", "3"):
            raise ValueError(f"not a merge-tree conflict record: {record!r}")
        out.append((parts[0], parts[1], parts[2], path))
    return out


@dataclass(frozen=True)
class ConflictPair:
    """Whether ``left`` and ``right`` (a child and its target, or two siblings) would
    conflict if merged now, and on which ``files`` (empty: they merge cleanly)."""

    left: str
    right: str
    files: tuple[str, ...] = ()

    @property
    def conflicts(self) -> bool:
        return bool(self.files)


SKIPPED = {"merged": "already merged", "nothing": "no work to merge", "branch": "no branch"}
"""Why ``node conflicts`` leaves a child out, by key: its target holds all of its work and
a merge of it landed (``merged``); its target holds all of its work and no merge of it ever
landed (``nothing``: it never committed anything that travels); its branch is gone."""


def skipped_notice(node: str, skipped: Sequence[tuple[str, str]], *, compared: bool) -> str:
    """The notice naming the children of ``node`` that ``node conflicts`` left out, each
    ``(branch, key)`` with a key of SKIPPED, grouped by why and named by their last segment:
    ``every child of main skipped, nothing of them left to collide (no work to merge: a1,
    a2; already merged: b)``; ``compared`` False when no child was compared at all. Empty
    when none was left out."""
    if not skipped:
        return ""
    one = len(skipped) == 1
    count = "1 child" if one else f"{len(skipped)} children"
    groups = [f"{label}: " + ", ".join(b.rsplit(".", 1)[-1] for b, k in skipped if k == key)
              for key, label in SKIPPED.items() if any(k == key for _b, k in skipped)]
    return (f"{count if compared else 'every child'} of {node} skipped, nothing of "
            f"{'it' if one else 'them'} left to collide ({'; '.join(groups)})")
