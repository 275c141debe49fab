"""The effect side of a node's sandbox, as ``domain.sandbox.SandboxPaths``: where its git
dir, common dir and branch refs are, read from the files
(``gitfiles.git_dirs``), and its agent homes made fresh before each launch (the node's
Claude home and cache, its copy of the user's ``.claude.json``, its Codex login link)."""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Mapping
from pathlib import Path

from fractal.domain.agent.homes import codex_login
from fractal.domain.sandbox import (
    AGENT_HOMES,
    AGENT_SETTINGS,
    CHILD_WORK_DIRS,
    CLAUDE_JSON,
    NODE_CLAUDE_HOME,
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


CLAUDE_LOGIN = ".credentials.json"
"""Claude Code's login (OAuth tokens) in its config dir, rewritten on a token refresh."""


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


def _fresh_dir(path: Path) -> None:
    """Make ``path`` a real directory (mode 0700): whatever else is there (a symlink the
    agent left, a file) is removed first, so nothing fractal binds or writes through it
    can lead outside the node dir."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISDIR(mode):
        path.unlink()
    path.mkdir(mode=0o700, parents=True, exist_ok=True)


def _fresh_copy(source: Path, target: Path) -> bool:
    """Replace ``target`` with a copy of ``source`` (mode 0600, written beside it and
    renamed over, so a symlink at ``target`` is replaced, never followed); remove
    ``target`` when ``source`` is no regular file. Returns whether a copy was made."""
    if not source.is_file():
        if target.is_symlink() or target.exists():
            target.unlink()
        return False
    spare = target.with_name(f"{target.name}.fractal-new")
    spare.unlink(missing_ok=True)
    fd = os.open(spare, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as out, source.open("rb") as src:
        shutil.copyfileobj(src, out)
    os.replace(spare, target)
    return True


def _codex_login(node_dir: Path, env: Mapping[str, str]) -> str | None:
    """The user's Codex login file (``codex_login``, resolved) when it exists, with
    the node's ``.codex/auth.json`` made a link to it afresh (the agent may have pointed
    the link elsewhere: only the user's own file is ever bound writable)."""
    source = codex_login(env)
    if source is None or not source.is_file():
        return None
    target = source.resolve()
    link = node_dir / ".codex" / "auth.json"
    if target.parent == link.parent.resolve():
        return None  # CODEX_HOME is this node's own home: nothing of the user's to bind
    if not (link.is_symlink() and os.readlink(link) == str(target)):
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(target)
    return str(target)


def _claude_dir(home: str | None, env: Mapping[str, str]) -> Path | None:
    """The user's Claude config dir (``$CLAUDE_CONFIG_DIR``, else ``~/.claude``; None when
    neither is known), made when missing (mode 0700, with its parents), as Claude Code
    makes it on its first start: the node's Claude home is bound over it, and a missing
    one could be no mount point in the read-only home, leaving the CLI's sessions where
    none survives the launch. Raises OSError when it cannot be made (something else in
    its place)."""
    configured = env.get("CLAUDE_CONFIG_DIR")
    if not configured and not home:
        return None
    path = Path(configured) if configured else Path(home or "") / ".claude"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def _agent_homes(node_dir: Path, home: str | None,
                 env: Mapping[str, str]) -> dict[str, object]:
    """The agent-home fields of ``SandboxPaths`` for a launch, made fresh: the node's
    stand-ins (``domain.sandbox.AGENT_HOMES``) as real directories, its
    ``.claude.json`` a copy of the user's (removed when the user has none), its Codex
    login link; the user's Claude config dir always (``_claude_dir`` makes it), of the
    user's other dirs and files only those that exist."""
    for name in AGENT_HOMES:
        _fresh_dir(node_dir / name)
    configured = env.get("CLAUDE_CONFIG_DIR")
    claude_dir = _claude_dir(home, env)
    user_json = (claude_dir / CLAUDE_JSON if configured and claude_dir
                 else Path(home) / CLAUDE_JSON if home else None)
    copied = user_json is not None and _fresh_copy(user_json,
                                                   node_dir / NODE_CLAUDE_HOME / CLAUDE_JSON)
    logins = []
    if claude_dir is not None and (claude_dir / CLAUDE_LOGIN).is_file():
        logins.append(str(claude_dir / CLAUDE_LOGIN))
    codex = _codex_login(node_dir, env)
    if codex:
        logins.append(codex)
    cache = Path(home) / ".cache" if home else None
    return {
        "claude_dir": str(claude_dir) if claude_dir else None,
        "claude_json": str(user_json) if copied and not configured else None,
        "cache": str(cache) if cache and cache.is_dir() else None,
        "logins": tuple(logins),
    }


def sandbox_paths(repo: Path, worktree: Path, node_dir: Path, branch: str, *,
                  tmux_socket: Path, relay: Path | None, home: str | None,
                  program: str | None, env: Mapping[str, str] | None = None) -> SandboxPaths:
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
    the node's private object directory (``private_dir``); and the node's agent homes
    afresh, the user's Claude config dir when missing (``_agent_homes``; ``env`` gives
    ``CLAUDE_CONFIG_DIR`` and ``CODEX_HOME``, default none). Raises OSError when ``worktree`` is not a checkout whose git files can
    be read, or a dir, settings file or home cannot be made.
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
    homes = _agent_homes(node_dir, home, env or {})
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
        program=program_file, **homes)  # type: ignore[arg-type]
