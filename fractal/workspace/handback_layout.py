"""What a hand-back on an explicit merge base must fix in ``git merge-tree``'s result before
it lays it into the child's worktree, and the checks it makes before it touches anything.

``git merge-tree`` names the two sides of a conflict after the commits it was given, and a
hand-back gives it two scratch commits (``mergebase.based_on``): their ids would appear in
the conflict markers (``<<<<<<< 7ef8881...``) and in the names of files moved aside by a
file/directory conflict (``d~7ef8881...``), where ``git merge`` writes ``HEAD`` and the name
of what it merges. ``relabel`` puts ``git merge``'s names back, in the result tree and in the
conflict stages, so the child sees what a real merge would have left.

``lay_out`` writes the result into the worktree the way ``git merge`` does: files first,
then the whole index at once (result and conflict stages together), so an interrupted
hand-back never leaves conflict markers staged as if resolved.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from fractal.errors import GitError
from fractal.workspace.git import git_paths, run_git, run_git_bytes
from fractal.workspace.gitdirwrite import copy_regular
from fractal.workspace.scratch import scratch_index

__all__ = ["Stage", "lay_out", "merge_in_progress", "refuse_to_start", "relabel"]

# (mode, sha, stage, path), as ``domain.merge.conflicts.parse_stages`` reads them
Stage = tuple[str, str, str, str]
_MARKERS = (b"<<<<<<< ", b"||||||| ", b">>>>>>> ")


def _rename(path: str, names: dict[str, str]) -> str:
    for scratch, label in names.items():
        path = path.replace(f"~{scratch}", f"~{label}")
    return path


def _relabel_blob(worktree: Path, sha: str, names: dict[str, str]) -> str | None:
    """The id of blob ``sha`` with its conflict markers' scratch names replaced, or None
    when it has none (a binary file, a modify/delete)."""
    body = run_git_bytes(["cat-file", "blob", sha], worktree)
    lines = body.split(b"\n")
    changed = False
    for i, line in enumerate(lines):
        if not line.startswith(_MARKERS):
            continue
        rest = line[8:]
        token = rest.split(b":", 1)[0].split(b" ", 1)[0]  # "<id>[:<path>]"; may be abbreviated
        for scratch, label in names.items():
            if len(token) >= 4 and scratch.encode().startswith(token):
                short = label if len(token) == len(scratch) else label[:len(token)]
                lines[i] = line[:8] + short.encode() + rest[len(token):]
                changed = True
                break
    if not changed:
        return None
    return run_git_bytes(["hash-object", "-w", "--stdin"], worktree,
                      stdin=b"\n".join(lines)).decode().strip()


def relabel(worktree: Path, tree: str, stages: Sequence[Stage], names: dict[str, str],
            env: dict[str, str]) -> tuple[str, list[Stage]]:
    """``tree`` and ``stages`` (a ``git merge-tree`` result) with every scratch commit id in
    ``names`` replaced by its label: in the conflict markers of each conflicted file and in
    the paths of files moved aside. ``env`` points git at a scratch index to build the new
    tree in. Returns (tree, stages)."""
    fixed = [(mode, sha, stage, _rename(path, names)) for mode, sha, stage, path in stages]
    moved = {path: _rename(path, names) for *_, path in stages if _rename(path, names) != path}
    conflicted = list(dict.fromkeys(path for *_, path in fixed))
    run_git(["read-tree", tree], worktree, env=env)
    out = run_git(["ls-files", "-s", "-z", "--", *(f":(literal){p}" for p in
                                                   [*moved, *conflicted])],
                  worktree, env=env).stdout
    entries = {}
    for record in filter(None, out.split("\0")):
        meta, _, path = record.partition("\t")
        mode, sha, _stage = meta.split()
        entries[path] = (mode, sha)
    lines: list[str] = []
    for old, new in moved.items():
        if old in entries:
            lines.append(f"0 {'0' * len(entries[old][1])}\t{old}")
            entries[new] = entries.pop(old)
    for path in conflicted:
        if path not in entries:
            continue
        mode, sha = entries[path]
        blob = _relabel_blob(worktree, sha, names) if mode != "120000" else None
        lines.append(f"{mode} {blob or sha} 0\t{path}")
    if not lines:
        return tree, fixed
    run_git(["update-index", "-z", "--index-info"], worktree, env=env,
            stdin="".join(f"{line}\0" for line in lines))
    return run_git(["write-tree"], worktree, env=env).stdout.strip(), fixed


def merge_in_progress(worktree: Path) -> bool:
    """Tell whether ``worktree`` has an unconcluded merge (``MERGE_HEAD`` exists)."""
    return os.path.lexists(git_paths(worktree, ["MERGE_HEAD"])[0])


def refuse_to_start(worktree: Path, head: str, head_tree_paths: Sequence[str]) -> None:
    """Raise GitError, touching nothing, when a hand-back into ``worktree`` (at ``head``)
    would mix into or destroy what is there: an unconcluded merge, staged changes (the
    merge commit would carry them, and ``git merge --abort`` would drop them), or an
    untracked or ignored file at one of ``head_tree_paths`` (paths the merge writes)."""
    if merge_in_progress(worktree):
        raise GitError(f"{worktree} already has a merge in progress; conclude it there "
                       "(`git commit`) or drop it (`git merge --abort`), then hand back again")
    staged = [p for p in run_git(["diff", "--cached", "--name-only", "-z", "--no-renames",
                                  head], worktree).stdout.split("\0") if p]
    if staged:
        raise GitError(f"{worktree} has staged changes ({', '.join(staged[:10])}); commit "
                       "or unstage them there, then hand back again")
    if not head_tree_paths:
        return
    # every untracked or ignored file, wholly untracked directories as one "dir/" entry;
    # read whole rather than asked path by path (no argument list to outgrow)
    out = run_git(["ls-files", "-z", "--others", "--directory"], worktree).stdout
    others = set(filter(None, out.split("\0")))
    in_way = [p for p in head_tree_paths if p in others or any(
        f"{p[:i]}/" in others or p[:i] in others for i, ch in enumerate(p) if ch == "/")]
    if in_way:
        raise GitError(f"untracked or ignored files in {worktree} would be overwritten by "
                       f"the merge ({', '.join(in_way[:10])}); move or commit them there, "
                       "then hand back again")


def lay_out(worktree: Path, head: str, merged: str, stages: Sequence[Stage]) -> None:
    """Move ``worktree``'s files and index from ``head``'s tree to ``merged``'s, with each
    conflicted path's ``stages`` in place of its merged entry. The index is built in a copy
    in the repository's scratch dir (``scratch_index``: out of the agent's reach, never in
    the worktree's own git dir, where it could have planted a link for the copy to follow)
    and renamed over the real one only when complete (a rename replaces a link there,
    never writes through it). Raises GitError, nothing written, when git refuses (a local
    change or an untracked file in the way) or the index is not a regular file."""
    index = git_paths(worktree, ["index"])[0]  # where a link would be, never its target
    with scratch_index(worktree) as env:
        building = Path(env["GIT_INDEX_FILE"])
        try:
            copy_regular(index, building)
        except FileNotFoundError:
            pass  # no index yet: git starts from an empty one
        except OSError as exc:
            raise GitError(f"the index of {worktree} ({index}) cannot be read as a regular "
                           f"file ({exc.strerror or exc}); fractal never reads through a "
                           f"link there: remove it (`rm {index}`), run `git reset` in "
                           "the worktree, then hand back again") from exc
        run_git(["read-tree", "-m", "-u", head, merged], worktree, env=env)
        if stages:
            zero = "0" * len(head)
            lines = [f"0 {zero}\t{path}" for path in dict.fromkeys(p for *_, p in stages)]
            lines += [f"{mode} {sha} {stage}\t{path}" for mode, sha, stage, path in stages]
            run_git(["update-index", "-z", "--index-info"], worktree, env=env,
                    stdin="".join(f"{line}\0" for line in lines))
        os.replace(building, index)
