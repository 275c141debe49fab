"""The git side of a node's sandbox: where its git dir, common dir and branch refs are,
read from the files (``gitfiles.git_dirs``), as ``domain.sandbox.SandboxPaths``."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from fractal.domain.sandbox import (
    AGENT_SETTINGS,
    CHILD_WORK_DIRS,
    SUPERVISOR_TMP_DIRS,
    WORK_DIRS,
    SandboxPaths,
    private_objects,
)
from fractal.workspace.gitfiles import git_dirs

__all__ = ["private_dir", "sandbox_paths"]


def private_dir(git_dir: Path, common: Path, node_dir: Path) -> Path:
    """The node's private object directory (``domain.sandbox.private_objects``), made
    when missing; anything else in its place (a symlink, a file) is removed first, so
    the writable bind and the adoption only ever meet a real directory. Raises OSError
    when it cannot be made."""
    path = Path(private_objects(str(common), str(git_dir), str(node_dir)))
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    if info is not None and not stat.S_ISDIR(info.st_mode):
        os.unlink(path)
    path.mkdir(mode=0o755, parents=True, exist_ok=True)
    return path


def _ref_files(heads: Path) -> tuple[str, ...]:
    """Every loose ref file under ``heads`` (absolute paths), lock files aside."""
    found: list[str] = []
    for top, _dirs, files in os.walk(heads):
        found += [os.path.join(top, name) for name in files if not name.endswith(".lock")]
    return tuple(found)


def _pin_settings(home: Path) -> None:
    """Make each of ``domain.sandbox.AGENT_SETTINGS`` that is absent, with its empty
    content, where its directory exists (a missing directory cannot be made inside the
    sandbox either: ``$HOME`` is read-only there); a file that exists is never touched."""
    for name, content in AGENT_SETTINGS.items():
        path = home / name
        if not path.parent.is_dir():
            continue
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        except FileExistsError:
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(content)


def sandbox_paths(repo: Path, worktree: Path, node_dir: Path, branch: str, *,
                  tmux_socket: Path, relay: Path | None, home: str | None,
                  program: str | None) -> SandboxPaths:
    """The node's paths for ``domain.sandbox.policy``; of the directories to hide (the
    repository's ``.fractal`` and the directory of ``tmux_socket``) and the socket itself
    only those that exist (bubblewrap cannot make a mount point in a read-only directory,
    and a missing one holds nothing).

    Makes an empty ``config.worktree`` in the worktree's git dir when there is none, so
    the read-only bind covers it (else the agent could create one, which git reads as
    config once ``extensions.worktreeConfig`` is on), the node dir's work dirs and the
    supervisor's dirs in its ``tmp`` (``domain.sandbox.CHILD_WORK_DIRS``,
    ``SUPERVISOR_TMP_DIRS``), so each is a mount point inside: the rest of the node dir
    is read-only there, and a missing one could not be made; and the agent settings
    files under ``home`` that are absent (``_pin_settings``), for the same reason; and
    the node's private object directory (``private_dir``).
    Raises OSError when ``worktree`` is not a checkout whose git files can be read, or a
    dir or settings file cannot be made.
    """
    dirs = git_dirs(worktree)
    if dirs is None:
        raise OSError(f"cannot read the git dir of {worktree}; is it a checkout?")
    git_dir, common = dirs
    if git_dir != common:
        (git_dir / "config.worktree").touch(exist_ok=True)
    for name in WORK_DIRS if worktree == repo else CHILD_WORK_DIRS:
        (node_dir / name).mkdir(parents=True, exist_ok=True)
    for name in SUPERVISOR_TMP_DIRS:
        (node_dir / "tmp" / name).mkdir(exist_ok=True)
    private_dir(git_dir, common, node_dir)
    if home:
        _pin_settings(Path(home))
    program_dir = program_file = None
    if program and os.path.isabs(program):
        program_file = os.path.realpath(program)
        program_dir = os.path.dirname(program_file)
    return SandboxPaths(
        repo=str(repo), worktree=str(worktree), node_dir=str(node_dir),
        git_common=str(common), git_dir=str(git_dir),
        own_ref=str(common / "refs" / "heads" / branch),
        branch_refs=_ref_files(common / "refs" / "heads"),
        hide=tuple(str(d) for d in (repo / ".fractal",) if d.is_dir()),
        tmux_dir=str(tmux_socket.parent) if tmux_socket.parent.is_dir() else None,
        tmux_socket=str(tmux_socket) if os.path.lexists(tmux_socket) else None,
        relay=None if relay is None else str(relay), home=home, program_dir=program_dir,
        program=program_file)
