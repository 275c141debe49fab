"""What a sandboxed launch may have done to the branch refs, and what undoes it (pure: no
I/O, no clock).

Inside the sandbox ``refs/heads`` is writable (the agent commits to its own branch) while
every other branch's loose ref file is bound read-only over it. Around that the agent
could still: shadow a branch kept only in ``packed-refs`` with a loose file of its own,
turn its own branch into a symbolic ref naming a sibling's (a merge or a backstop commit
would then carry or move the sibling's work), plant a symbolic branch ref under a new
name, create a branch under a future node's name, and leave a ``*.lock`` behind that blocks every later update of that ref. The rule
the supervisor applies around each launch:

* before: every branch only in ``packed-refs`` gets its loose file with the same sha (the
  read-only bind then pins it too);
* after: the node's own branch, when symbolic, is set back to the sha it had before the
  launch; any other symbolic branch ref is deleted, and so is a branch made during the
  launch under a node's name (``<root>.*``) that no node owns (a squat that would block
  ``node init`` of that name); a ``*.lock`` under ``refs/heads``
  that appeared during the launch is removed (every process of the launch has ended, and
  git holds a lock for milliseconds), and so is one older than ``STALE_LOCK_AGE``
  (before each launch too);
* after: a branch made during the launch that a node owns (a ``node init`` while the
  launch ran: no read-only bind pins it) is set back to the sha its own worktree's
  ``HEAD`` reflog last recorded (``<common>/worktrees/<name>/logs/HEAD``: every commit,
  reset or merge made in that worktree is logged there, and no other node's sandbox can
  write it), unless it points there already or at a merge-base advance of it (first
  parent that sha, the same tree: no content changed). A branch whose worktree recorded
  nothing is left as it is.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["STALE_LOCK_AGE", "RefText", "last_logged", "packed_branches", "read_ref",
           "repair_of", "restore_recorded", "stale_lock"]

STALE_LOCK_AGE = 30.0  # seconds a ref lock may live before it counts as left behind
_HEADS = "refs/heads/"


class RefText(NamedTuple):
    """A loose ref file's content: a ``sha``, or a ``symbolic`` target (``refs/...``), or
    neither (broken: both empty)."""

    sha: str
    symbolic: str


def read_ref(text: str) -> RefText:
    """``text`` of a loose ref file as a RefText (``ref: X`` is symbolic, 40 or 64 hex
    digits a sha, anything else broken)."""
    line = text.strip()
    if line.startswith("ref:"):
        return RefText("", line[4:].strip())
    if len(line) in (40, 64) and all(c in "0123456789abcdef" for c in line):
        return RefText(line, "")
    return RefText("", "")


def packed_branches(text: str) -> dict[str, str]:
    """The branches of a ``packed-refs`` file's ``text``: branch name (under
    ``refs/heads/``) -> sha; comment and peeled (``^``) lines skipped."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        if not line or line[0] in "#^":
            continue
        sha, _, ref = line.partition(" ")
        if ref.startswith(_HEADS) and read_ref(sha).sha:
            found[ref[len(_HEADS):]] = sha
    return found


def repair_of(branch: str, found: RefText, own: str, own_before: str | None, *,
              new: bool = False, known: bool = True, root: str = "") -> str | None:
    """What undoes ``found`` at branch ``branch`` after a launch of node ``own`` (whose
    branch pointed at ``own_before``, None: unknown): the sha to set it back to, "" to
    delete it, or None to leave it. A symbolic ref is repaired; so is a branch ``new``
    since the launch began, named as a node of the tree ``root`` could be (``root`` or
    ``root.*``), that no one ``known`` owns (not a node of the ledger, not checked out in
    another worktree): a squat that would block ``node init`` of that name. Any other new
    branch is the agent's own business (``git checkout -b``) and stays. The node's own
    branch is never deleted (left as it is when its sha before is unknown)."""
    if branch == own:
        return own_before if found.symbolic else None
    if found.symbolic:
        return ""
    node_name = bool(root) and (branch == root or branch.startswith(root + "."))
    return "" if new and not known and node_name else None


def stale_lock(age: float, *, new: bool) -> bool:
    """Whether a ``*.lock`` under ``refs/heads``, ``age`` seconds old, was left behind:
    ``new`` (it appeared during the launch just ended) or older than ``STALE_LOCK_AGE``."""
    return new or age >= STALE_LOCK_AGE


def last_logged(text: str) -> str | None:
    """The sha the newest entry of a reflog's ``text`` moved its ref to (each line is
    ``<old sha> <new sha> <who> <when>\t<message>``); None when it has no such entry."""
    for line in reversed(text.splitlines()):
        fields = line.split(" ", 2)
        if len(fields) == 3:
            return read_ref(fields[1]).sha or None
    return None


def restore_recorded(found: RefText, recorded: str | None, *, advance: bool) -> str | None:
    """What undoes a move of a branch made during the launch that a node owns: the sha
    ``recorded`` for it by its own worktree (None: nothing recorded, leave it), or None
    when ``found`` points there already or is a merge-base ``advance`` of it (fractal's
    own move, which changes no content). A symbolic or broken ``found`` is not this
    rule's (``repair_of`` deletes a symbolic one)."""
    if recorded is None or not found.sha or found.sha == recorded or advance:
        return None
    return recorded
