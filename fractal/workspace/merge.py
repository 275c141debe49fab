"""The git side of ``fractal node merge``: compute a squash without touching any worktree,
land it on the target by fast-forward, advance the child's merge base, hand a conflict back.

The squash is computed in the object store alone: ``git merge-tree --write-tree`` merges
the child's tip with the target's tip, on the base ``mergebase.merge_base`` names once the
child has been merged before (git's own base is wrong after a merge-base advance); the
result is then filtered in a temporary index (nothing under ``.fractal/`` travels: that
subtree is put back exactly as the target has it; runtime artifacts are put back too),
written as a tree and committed with
``git commit-tree`` on top of the target's tip. Only then is the target's worktree touched,
by one ``git merge --ff-only`` to that commit: git checks the whole update before it writes
anything, so a refusal (an untracked file in the way) leaves the target as it was. A
conflict is found before any of that, so the target is never touched by one.

The merge base advances without a worktree either: a commit with the child's own tree and
the parents (child tip, squash) — what ``git merge -s ours`` makes — moved onto the child's
branch by a compare-and-swap ``update-ref``. The child's files never change, so it works
whether the child's worktree is clean, dirty or gone.

A conflict handed back is the target's tip merged into the child's worktree on the same
base the squash used, left there with its markers for the child to resolve and commit.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from fractal.domain.merge.conflicts import MergeTree, parse_merge_tree, parse_stages
from fractal.domain.merge.rules import NODE_DIRS, travels_by_place
from fractal.errors import GitError
from fractal.workspace.artifacts import is_runtime_artifact
from fractal.workspace.git import changed_paths, git_paths, gitlink_excludes, head_sha, run_git
from fractal.workspace.gitdirwrite import replace_file
from fractal.workspace.handback_layout import (
    lay_out,
    merge_in_progress,
    refuse_to_start,
    relabel,
)
from fractal.workspace.mergebase import (
    LandedMerge,
    advance_base,
    advance_subject,
    based_on,
    contains,
    is_advance,
    merge_base,
)
from fractal.workspace.scratch import scratch_index

__all__ = [
    "LandedMerge",
    "SquashPlan",
    "advance_base",
    "advance_subject",
    "contains",
    "diff_names",
    "diff_text",
    "diffstat_lines",
    "fast_forward",
    "hand_back_merge",
    "merge_base",
    "merge_tree",
    "plan_squash",
    "roll_back",
    "subjects_since_merge",
    "untracked_in_the_way",
    "worktree_of_branch",
    "worktree_tree",
    "write_squash_commit",
]

@dataclass(frozen=True)
class SquashPlan:
    """A computed merge of ``child_sha`` into ``target_sha``.

    ``conflicts`` lists conflicting paths (then ``tree`` is None); otherwise ``tree`` is the
    filtered result and ``files`` the paths it changes against the target (empty: nothing
    new to merge). ``base`` is the commit whose tree served as the merge base (None: git's
    own), which a hand-back of the conflict must use too (``hand_back_merge``).
    """

    child_sha: str
    target_sha: str
    tree: str | None
    files: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()
    base: str | None = None


def merge_tree(repo: Path, left: str, right: str) -> MergeTree:
    """``git merge-tree --write-tree`` of two commits: the result tree and the conflicting
    paths outside ``.fractal/`` (whose changes never travel). Touches no worktree. Raises
    GitError when git cannot merge them at all (unrelated histories, an unknown ref)."""
    proc = run_git(["merge-tree", "--write-tree", "--name-only", "--no-messages", "-z",
                    left, right], repo, check=False)
    if proc.returncode not in (0, 1) or not proc.stdout:
        detail = proc.stderr.strip() or "(no output)"
        raise GitError(f"git merge-tree {left} {right} failed in {repo} "
                       f"(exit {proc.returncode}): {detail}")
    return parse_merge_tree(proc.stdout, ignore=(NODE_DIRS,))


def diff_names(repo: Path, old: str, new: str) -> tuple[str, ...]:
    """Paths that differ between two tree-ishes (renames as delete plus add)."""
    out = run_git(["diff", "--name-only", "-z", "--no-renames", old, new], repo).stdout
    return tuple(p for p in out.split("\0") if p)


def _entry(repo: Path, commit: str, path: str) -> str | None:
    """``<mode> <sha>`` of ``path`` in ``commit``, or None when it is absent."""
    out = run_git(["ls-tree", "-z", commit, "--", f":(literal){path}"], repo).stdout
    for record in filter(None, out.split("\0")):
        meta, _, name = record.partition("\t")
        if name == path:
            mode, _kind, sha = meta.split()
            return f"{mode} {sha}"
    return None


def _filter(repo: Path, merged_tree: str, target_sha: str) -> str:
    """``merged_tree`` with ``.fractal/`` and runtime artifacts as commit ``target_sha`` has
    them (the target's tip for a squash, the child's for a hand-back)."""
    return _filtered(repo, merged_tree, target_sha)[0]


def _filtered(repo: Path, merged_tree: str, target_sha: str
              ) -> tuple[str, tuple[str, ...] | None]:
    """(``_filter``'s tree, the paths it differs in from ``target_sha`` when the filter
    asked git for them on that very tree, else None)."""
    with scratch_index(repo) as env:
        run_git(["read-tree", merged_tree], repo, env=env)
        run_git(["rm", "-r", "--cached", "-q", "--ignore-unmatch", "--", NODE_DIRS], repo,
                env=env)
        # the target's own subtree, when it has one (nearly always: read first, and only a
        # refusal asks whether it is there at all)
        put_back = ["read-tree", f"--prefix={NODE_DIRS}/", f"{target_sha}:{NODE_DIRS}"]
        if run_git(put_back, repo, env=env, check=False).returncode != 0 \
                and _entry(repo, target_sha, NODE_DIRS) is not None:
            run_git(put_back, repo, env=env)  # raises with git's own message
        tree = run_git(["write-tree"], repo, env=env).stdout.strip()
        names = diff_names(repo, target_sha, tree)
        artifacts = [p for p in names if is_runtime_artifact(p)]
        if not artifacts:
            return tree, names
        for path in artifacts:
            entry = _entry(repo, target_sha, path)
            if entry is None:
                run_git(["update-index", "--force-remove", "--", path], repo, env=env)
            else:
                mode, sha = entry.split()
                run_git(["update-index", "--add", "--cacheinfo", f"{mode},{sha},{path}"],
                        repo, env=env)
        return run_git(["write-tree"], repo, env=env).stdout.strip(), None


def _two_commits(repo: Path, first: str, second: str) -> tuple[str, str]:
    """``(head_sha(repo, first), head_sha(repo, second))`` from one ``rev-parse`` when
    both name a commit (``--revs-only`` leaves out an argument that does not); else each
    is asked alone, for git's own error."""
    if not (first.startswith("-") or second.startswith("-")):
        proc = run_git(["rev-parse", "--revs-only", f"{first}^{{commit}}",
                        f"{second}^{{commit}}"], repo, check=False)
        shas = proc.stdout.split("\n")
        if proc.returncode == 0 and len(shas) == 3 and shas[2] == "" \
                and all(_SHA.fullmatch(sha) for sha in shas[:2]):
            return shas[0], shas[1]
    return head_sha(repo, first), head_sha(repo, second)


_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def plan_squash(repo: Path, child: str, target: str,
                landed: LandedMerge | None = None) -> SquashPlan:
    """Compute the squash of branch ``child`` into branch ``target`` (see the module
    docstring) on the base ``merge_base`` picks (``landed``: the child's newest merge into
    ``target`` that landed, from the tree's records, or None). Touches no worktree and no
    ref. Raises GitError."""
    child_sha, target_sha = _two_commits(repo, child, target)
    base = merge_base(repo, child_sha, target_sha, landed)
    if base is None:
        merged = merge_tree(repo, target_sha, child_sha)
    else:
        merged = merge_tree(repo, *based_on(repo, base, target_sha, child_sha))
    if not merged.clean:
        return SquashPlan(child_sha, target_sha, None, conflicts=merged.conflicts, base=base)
    tree, names = _filtered(repo, merged.tree, target_sha)
    if names is None:
        names = diff_names(repo, target_sha, tree)
    files = tuple(p for p in names if travels_by_place(p))
    return SquashPlan(child_sha, target_sha, tree, files, base=base)


def diff_text(repo: Path, old: str, new: str, *, stat: bool) -> str:
    """The patch (or, with ``stat``, the diffstat) from ``old`` to ``new``, nothing under
    ``.fractal/``."""
    shape = ["--stat=100"] if stat else ["--patch"]
    return run_git(["diff", *shape, "--no-color", "--no-ext-diff", "--no-textconv", old, new, "--", ".",
                    f":(exclude){NODE_DIRS}"], repo).stdout.rstrip("\n")


def worktree_tree(worktree: Path) -> str:
    """The tree of ``worktree``'s files as they are on disk now: its HEAD's tree with every
    tracked change and every untracked file git does not ignore, written from a scratch
    index (the worktree's own index and files are not touched). Raises GitError."""
    with scratch_index(worktree) as env:
        run_git(["read-tree", "HEAD"], worktree, env=env)
        run_git(["add", "-A", "--", ".", *gitlink_excludes(worktree, env)], worktree, env=env)
        return run_git(["write-tree"], worktree, env=env).stdout.strip()


def diffstat_lines(repo: Path, old: str, new: str) -> list[str]:
    """``git diff --stat`` between two tree-ishes, one line per file plus the summary."""
    out = run_git(["diff", "--stat=100", "--no-color", "--no-ext-diff", "--no-textconv", old, new], repo).stdout
    return [line.rstrip() for line in out.splitlines() if line.strip()]


def subjects_since_merge(repo: Path, child_sha: str, target_sha: str,
                         limit: int, base: str | None = None,
                         landed: LandedMerge | None = None) -> list[str]:
    """Subjects of the child's own commits not yet merged, newest first (at most ``limit``
    + 1, so the caller can tell there are more). Commits up to the last recorded merge
    already travelled (``landed``: the child's newest merge into the target that landed,
    from the tree's ``merges`` records, when the target still holds its squash), and so did
    those before the newest merge-base advance and those up to ``base``
    (``SquashPlan.base``: the merge base the squash uses); merge commits are left out."""
    exclude = [f"^{target_sha}"] + ([f"^{base}"] if base else [])
    if landed is not None and landed.child_sha != base and \
            contains(repo, target_sha, landed.squash_sha):
        exclude.append(f"^{landed.child_sha}")
    merges = run_git(["rev-list", "--merges", "--first-parent", "--max-count=200", child_sha,
                      f"^{target_sha}"], repo).stdout.split()
    for commit in merges:
        if is_advance(repo, commit, target_sha):
            exclude.append(f"^{commit}")
            break
    out = run_git(["log", "--no-merges", f"--max-count={limit + 1}", "--format=%s",
                   child_sha, *exclude, "--"], repo).stdout
    return out.splitlines()


def write_squash_commit(repo: Path, plan: SquashPlan, message: str) -> str:
    """Commit ``plan.tree`` on top of the target's tip (no ref moves); return its sha."""
    if plan.tree is None:
        raise GitError("a conflicting merge has no squash commit to write")
    return run_git(["commit-tree", plan.tree, "-p", plan.target_sha, "-F", "-"], repo,
                   stdin=message.rstrip() + "\n").stdout.strip()  # no message file to leave


def fast_forward(worktree: Path, squash_sha: str) -> None:
    """Move the branch checked out in ``worktree`` to ``squash_sha`` (a child of its tip),
    updating its index and files. Raises GitError, leaving the worktree as it was, when
    git refuses (an untracked file in the way, a moved tip)."""
    run_git(["-c", f"core.hooksPath={os.devnull}", "merge", "--ff-only", "--quiet",
             "--no-edit", squash_sha], worktree)


def roll_back(worktree: Path, old_sha: str, squash_sha: str) -> list[str]:
    """Undo a fast-forward to ``squash_sha`` that was cut short (HEAD still ``old_sha``):
    the paths the squash changes go back to ``old_sha``'s content in the index and on
    disk. Safe because a merge starts only from a worktree clean outside ``.fractal/``,
    which the squash never changes. Returns the paths it restored."""
    paths = list(diff_names(worktree, old_sha, squash_sha))
    dirty = set(changed_paths(worktree)) | set(_index_changes(worktree))
    touched = [p for p in paths if p in dirty]
    if not touched:
        return []
    present = [p for p in touched if _entry(worktree, old_sha, p) is not None]
    added = [p for p in touched if p not in present]
    if present:
        run_git(["--literal-pathspecs", "checkout", old_sha, "--", *present], worktree)
    if added:
        run_git(["--literal-pathspecs", "rm", "-q", "-f", "--cached", "--ignore-unmatch",
                 "--", *added], worktree)
        for rel in added:
            with suppress(FileNotFoundError):
                (worktree / rel).unlink()
    return touched


def _index_changes(worktree: Path) -> list[str]:
    out = run_git(["diff", "--cached", "--name-only", "-z", "--no-renames"], worktree).stdout
    return [p for p in out.split("\0") if p]


def hand_back_merge(worktree: Path, target_sha: str, message: str,
                    base: str | None = None) -> list[str]:
    """Merge ``target_sha`` into the branch checked out in ``worktree``, leaving the
    conflicts there (markers in the files, ``MERGE_HEAD`` set) for the node to resolve.
    ``base`` is the merge base the squash used (``SquashPlan.base``; None: git's own).
    Returns the conflicting paths (outside ``.fractal/``); an empty list means git merged
    cleanly (the merge is then left staged, uncommitted, for the node to conclude).
    Raises GitError when git refuses to start (local changes in the way)."""
    if base is not None:
        return _hand_back_on(worktree, target_sha, message, base)
    head = head_sha(worktree)  # git merge overwrites an ignored file; refuse first instead
    refuse_to_start(worktree, head, _added(worktree, head,
                                           merge_tree(worktree, head, target_sha).tree))
    proc = run_git(["-c", f"core.hooksPath={os.devnull}", "merge", "--no-ff", "--no-commit",
                    "-m", message, target_sha], worktree, check=False)
    out = run_git(["diff", "--name-only", "-z", "--diff-filter=U", "--ignore-submodules=dirty"],
                  worktree).stdout
    conflicts = [p for p in out.split("\0") if p and travels_by_place(p)]
    if proc.returncode != 0 and not conflicts and not merge_in_progress(worktree):
        detail = proc.stderr.strip() or proc.stdout.strip() or "(no output)"
        raise GitError(f"git merge {target_sha[:10]} refused in {worktree}: {detail}")
    return conflicts


def _hand_back_on(worktree: Path, target_sha: str, message: str, base: str) -> list[str]:
    """``hand_back_merge`` on an explicit ``base``: the merge is computed in the object
    store (``merge-tree`` of two scratch commits on ``base``'s tree), then laid into the
    worktree as ``git merge --no-commit`` would leave it: files and index at the result,
    each conflicted path's stages in the index, ``MERGE_HEAD`` the target's tip, so the
    node resolves it and ``git commit --no-edit`` makes the merge commit (or ``git merge
    --abort`` drops it). Nothing under ``.fractal/`` travels this way either, nor does a
    runtime artifact: they stay as the child has them."""
    head = head_sha(worktree)
    refuse_to_start(worktree, head, ())  # before any work: a merge in progress, staged changes
    ours, theirs = based_on(worktree, base, head, target_sha)
    proc = run_git(["merge-tree", "--write-tree", "--no-messages", "-z", ours, theirs],
                   worktree, check=False)
    fields = proc.stdout.split("\0")
    if proc.returncode not in (0, 1) or not fields[0].strip():
        detail = proc.stderr.strip() or "(no output)"
        raise GitError(f"git merge-tree of {target_sha[:10]} into {worktree} failed "
                       f"(exit {proc.returncode}): {detail}")
    try:
        records = parse_stages(fields[1:])
    except ValueError as exc:
        raise GitError(f"git merge-tree of {target_sha[:10]} into {worktree}: {exc}") from exc
    with scratch_index(worktree) as env:  # git merge's names for the two sides, not the scratch ids
        tree, records = relabel(worktree, fields[0].strip(), records,
                                {ours: "HEAD", theirs: target_sha,
                                 head_sha(worktree, f"{ours}^"): base}, env)
    stages = [s for s in records if travels_by_place(s[3]) and not is_runtime_artifact(s[3])]
    merged = _filter(worktree, tree, head)
    refuse_to_start(worktree, head, _added(worktree, head, merged))
    lay_out(worktree, head, merged, stages)
    # MERGE_HEAD last: it is what makes git (and fractal) read a merge in progress. Each is
    # renamed into place, never written through a link the child left in its git dir.
    texts = {"MERGE_MSG": message.rstrip(), "MERGE_MODE": "no-ff", "ORIG_HEAD": head,
             "MERGE_HEAD": target_sha}
    for name, raw in zip(texts, git_paths(worktree, list(texts)), strict=True):
        try:
            replace_file(raw, (texts[name] + "\n").encode("utf-8"))
        except OSError as exc:
            raise GitError(f"cannot write {raw} for the hand-back into {worktree}: "
                           f"{exc.strerror or exc}; remove what is there, run "
                           "`git merge --abort` in the worktree, then hand back again") from exc
    return list(dict.fromkeys(p for *_, p in stages))


def _added(worktree: Path, head: str, merged: str) -> list[str]:
    """Paths the merged tree has and ``head`` has not (where an untracked file is in the
    way)."""
    out = run_git(["diff", "--name-only", "-z", "--no-renames", "--diff-filter=A", head,
                   merged], worktree).stdout
    return [p for p in out.split("\0") if p]


def worktree_of_branch(repo: Path, branch: str) -> Path | None:
    """The worktree that has ``branch`` checked out (``git worktree list``), or None."""
    out = run_git(["worktree", "list", "--porcelain"], repo).stdout
    for block in out.split("\n\n"):
        lines = block.splitlines()
        path = next((ln[len("worktree "):] for ln in lines if ln.startswith("worktree ")), None)
        if path and f"branch refs/heads/{branch}" in lines:
            return Path(path)
    return None


def untracked_in_the_way(worktree: Path, paths: Sequence[str]) -> list[str]:
    """The ``paths`` that exist in ``worktree`` as untracked files (a fast-forward that
    adds them would be refused)."""
    if not paths:
        return []
    out = run_git(["ls-files", "-z", "--others", "--", *(f":(literal){p}" for p in paths)],
                  worktree).stdout
    return [p for p in out.split("\0") if p]
