"""The sandbox an agent launch runs in: which paths it may write, which it may only read,
which it must not see, and whether a launch may run at all (pure: no I/O, no clock).

The rule, in the order the mounts are laid (a later mount covers an earlier one):

1. the whole filesystem read-only, a fresh ``/dev`` and ``/proc``, a private ``/tmp``;
2. what the private ``/tmp`` hid and the agent must still read: the main checkout and the
   program's own directory (read-only);
3. hidden (an empty tmpfs): every tree's data directory (``<repo>/.fractal``: the
   database, the tree latch, the relay sockets) and fractal's tmux socket directory,
   unless that directory holds what the launch needs (the repository, the worktree, the
   program, ``$HOME``: a ``FRACTAL_TMUX_SOCKET`` beside the project), when only the
   socket itself is covered, with ``/dev/null``, after every other mount; the launched
   program alone comes back read-only when it lies in a hidden dir (the demo keeps its
   agent in the tree's data dir);
4. writable: the node's worktree (its node dir, plans, memory, agent homes and
   ``tmp`` are inside it), the node's private object directory (``private_objects``),
   the branch refs directory, the node's own branch reflog (``logs/refs/heads/<branch>``;
   the root node also its ``logs/HEAD``) and the worktree's own git directory (its
   ``HEAD`` reflog is there). Every other reflog stays read-only, and git inside is told
   not to create new ones (``no_new_reflogs``), so the agent's ``git checkout -b`` still
   works. The root node's worktree is the main checkout and its node dir the tree's data
   dir: only its plans, memory, ``tmp`` (with its private object directory) and agent
   homes come back writable. The user's agent homes are never writable: the node's own
   stand in for them (``AGENT_HOMES``): ``<node_dir>/.claude/home`` bound over the user's
   Claude config dir, the node's fresh copy of ``~/.claude.json`` over it, and
   ``<node_dir>/tmp/cache`` over ``~/.cache``; inside the node's Claude home the user's
   login file (``.credentials.json``, and Codex's ``auth.json`` at its own path) is
   bound writable (a token refresh rewrites the one file every node and the user read:
   a copy would fork a rotating refresh token), and the user's ``CLAUDE_SHARED`` entries
   read-only;
5. read-only again, over the writable binds: every other branch's ref file (pinned: a
   rename over a mount point fails), and every directory under ``refs/heads`` that holds
   one (a ``feature/`` of ``feature/y``: renamed away, it would take the pin with it),
   bound again writable in place when it also holds the node's own ref; the worktree's
   ``.git`` file and its git directory's ``commondir``, ``gitdir`` and
   ``config.worktree`` (each names what git runs or reads as config); for a child, the
   worktree's ``.fractal`` and the node dir themselves (mount points: neither can be
   renamed away and rebuilt with other limits, and no file the supervisor writes there,
   ``command.err``, ``setup.log``, ``pane.log``, ``.session``, can be swapped for a
   symlink), with only the node's work dirs (``CHILD_WORK_DIRS``) bound writable again; the
   node's ``config.json`` and ``steps/``; the supervisor's own dirs in ``tmp``
   (``SUPERVISOR_TMP_DIRS``); and the user's agent settings and instruction
   files (made empty when absent, so an agent cannot plant one);
6. the node's own relay socket, bound at its own path inside the hidden data dir.

``.git/config``, ``.git/hooks`` and the shared ``.git/objects`` are never writable:
they lie under the read-only ``.git`` and no writable bind covers them, nor is
``logs/HEAD`` of the main checkout for a child (its own worktree's ``HEAD`` reflog lies in
its git directory). Every git the agent runs writes its new objects into the private
object directory instead and reads the shared ones as an alternate (``object_env``: set on
bubblewrap's command line, so whatever the launch's own environment says); the supervisor
adopts them into the shared store, each checked, once the launch ends
(``workspace.adoption``). An agent that unsets the variables only meets a read-only
store. A writable ``refs/heads`` still lets the agent
create a new branch ref or move its own; it cannot move or delete an existing one of
another node (pinned in 5), and ``packed-refs`` lies in the read-only ``.git``.

The process side (``--unshare-pid``, ``--die-with-parent``, all capabilities dropped)
ends every process of a launch with it; the network is kept (agents call their API).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from pathlib import PurePosixPath
from typing import NamedTuple

__all__ = [
    "AGENT_HOMES",
    "CHILD_WORK_DIRS",
    "CLAUDE_JSON",
    "CLAUDE_SHARED",
    "NODE_CACHE",
    "NODE_CLAUDE_HOME",
    "RELAY_ENV",
    "SUPERVISOR_TMP_DIRS",
    "TOKEN_ENV",
    "WORK_DIRS",
    "Mode",
    "Mount",
    "Op",
    "SandboxPaths",
    "Verdict",
    "bwrap_args",
    "decide",
    "mode_of",
    "no_new_reflogs",
    "object_env",
    "policy",
    "private_objects",
]

RELAY_ENV = "FRACTAL_RELAY"
"""Inside the sandbox: the path of the node's relay socket (where ``fractal`` forwards)."""
TOKEN_ENV = "FRACTAL_RELAY_TOKEN"
"""Inside the sandbox: the launch's relay token, the secret every request to the relay
must carry (set on bubblewrap's command line only: never in the database or a file)."""


class Mode(StrEnum):
    """The tree's ``sandbox`` setting."""

    AUTO = "auto"  # sandbox every launch; refuse a launch where none can run
    ON = "on"  # the same, named explicitly
    OFF = "off"  # run unsandboxed (``node status`` says so)


def mode_of(tree_config: object) -> Mode | str:  # (a Mode is a str too: test for Mode)
    """The ``sandbox`` key of the tree's config (the root data dir's ``config.json``):
    a Mode (missing or null: AUTO), or the problem text when the value is none of
    ``auto``, ``on``, ``off``. A node's own config.json is never read for it."""
    value = tree_config.get("sandbox") if isinstance(tree_config, dict) else None
    if value is None:
        return Mode.AUTO
    try:
        return Mode(str(value)) if isinstance(value, str) else _bad(value)
    except ValueError:
        return _bad(value)


def _bad(value: object) -> str:
    return (f"the tree's sandbox setting {value!r} is not one of auto, on, off; fix "
            "\"sandbox\" in the root data dir's config.json")


class Verdict(NamedTuple):
    """Whether launches run sandboxed: ``sandboxed`` True, or False with ``refusal`` empty
    (``sandbox: off``), or a ``refusal`` text saying why and what to do."""

    sandboxed: bool
    refusal: str = ""


def decide(mode: Mode, missing: str) -> Verdict:
    """The launch verdict for ``mode`` when the machine's sandbox problem is ``missing``
    ("" when bubblewrap runs here): OFF never sandboxes; AUTO and ON sandbox, and refuse
    every launch when no sandbox can run, naming how to enable one or opt out."""
    if mode is Mode.OFF:
        return Verdict(False)
    if not missing:
        return Verdict(True)
    why = missing if len(missing) <= 80 else missing[:79] + "…"  # the run's reason: 250
    return Verdict(False, f"cannot sandbox the agent: {why}; install bubblewrap (apt-get "
                          "install bubblewrap) and allow user namespaces (sysctl "
                          "kernel.unprivileged_userns_clone=1), or set \"sandbox\": "
                          "\"off\" in the tree's config.json")


class Op(StrEnum):
    """One bubblewrap mount operation."""

    RO = "--ro-bind"
    RO_TRY = "--ro-bind-try"  # skipped when the source is missing
    RW = "--bind"
    RW_TRY = "--bind-try"
    TMPFS = "--tmpfs"
    NULL = "null"  # ``/dev/null`` bound read-only over the path (``--ro-bind /dev/null``)


class Mount(NamedTuple):
    """One mount: ``op`` of ``source`` bound at ``path`` inside (``source`` empty: the
    same path; bubblewrap reads every source from the filesystem outside, so a source
    under an earlier mount is still the outside one)."""

    op: Op
    path: str
    source: str = ""


class SandboxPaths(NamedTuple):
    """What the policy needs to know of one node's launch, every path absolute.

    ``git_common`` is the repository's git directory (``<repo>/.git``), ``git_dir`` the
    worktree's own (``.git/worktrees/<name>``; equal to ``git_common`` for the root node),
    ``branch_refs`` every file under ``refs/heads`` now, ``own_ref`` the node's branch ref
    file, ``hide`` the directories to hide that exist (every tree's data dirs,
    ``<repo>/.fractal``), ``tmux_dir`` fractal's tmux socket dir when it exists and
    ``tmux_socket`` the socket when it exists (None: absent), ``relay`` the node's relay socket
    (None: no relay), ``home`` the agent's $HOME (None: unknown), ``program_dir`` the
    directory of the program launched and ``program`` the program itself (its real
    path; None when it was named without a directory).

    The agent homes (``AGENT_HOMES``): ``claude_dir`` is the user's Claude config dir
    (``$CLAUDE_CONFIG_DIR``, else ``~/.claude``; made when missing, None only when
    neither is known) and ``claude_json`` the user's ``~/.claude.json`` (None: absent,
    or inside ``claude_dir`` as under ``CLAUDE_CONFIG_DIR``), ``cache`` the user's
    ``~/.cache``, these two only when they exist (a missing one cannot be a mount point
    in the read-only home); ``logins`` the user's
    login files the CLIs rewrite on a token refresh, bound writable at their own paths."""

    repo: str
    worktree: str
    node_dir: str
    git_common: str
    git_dir: str
    own_ref: str
    branch_refs: tuple[str, ...]
    hide: tuple[str, ...]
    relay: str | None
    home: str | None
    program_dir: str | None = None
    program: str | None = None
    tmux_dir: str | None = None
    tmux_socket: str | None = None
    claude_dir: str | None = None
    claude_json: str | None = None
    cache: str | None = None
    logins: tuple[str, ...] = ()


WORK_DIRS = ("plans", "memory", "tmp", ".claude", ".codex")
"""The node dir's dirs the agent writes: the rest of the node dir is read-only (the root
node's node dir is the tree's data dir, hidden: only these come back)."""
CHILD_WORK_DIRS = (*WORK_DIRS, "scripts")
"""A child's agent also writes its node's ``scripts/`` (``setup.sh``, the ``lint.sh`` its
relayed ``fractal commit`` runs): each runs only inside its sandbox."""
SUPERVISOR_TMP_DIRS = ("err", "checks", "bin")
"""Under the node's ``tmp``: what the supervisor writes there (launch stderr, check logs,
the ``fractal`` stand-in), read-only inside so none can be swapped for a symlink."""
NODE_CLAUDE_HOME = ".claude/home"
"""Under the node dir: the node's own Claude config dir, bound over the user's inside
its sandbox (sessions, todos, history, its copy of ``.claude.json``)."""
NODE_CACHE = "tmp/cache"
"""Under the node dir: the node's own ``~/.cache`` inside its sandbox."""
CLAUDE_JSON = ".claude.json"
"""Claude Code's global config file: in ``$CLAUDE_CONFIG_DIR`` when set, else in
``$HOME``; the node's copy is made fresh from the user's before each launch."""
AGENT_HOMES = (NODE_CLAUDE_HOME, NODE_CACHE)
"""The node dir's stand-ins for the user's agent homes (``workspace.sandboxpaths`` makes
them): what an agent writes there reaches only its own node's later launches."""
CLAUDE_SHARED = ("agents", "commands", "skills")
"""Under the user's Claude config dir: the user's own subagents, commands and skills,
bound read-only into the node's Claude home (with ``settings.json`` and ``CLAUDE.md``,
``AGENT_SETTINGS``), so every node still has them and none can change them."""
AGENT_SETTINGS = {".claude/settings.json": "{}\n", ".codex/config.toml": "",
                  ".claude/CLAUDE.md": "", ".codex/AGENTS.md": ""}
"""Under ``$HOME``: the user's agent settings and standing instructions, read-only (they
name commands to run, or tell every later agent what to do), with the content each is
made with when absent (``workspace.sandboxpaths``: an empty file means nothing to either
CLI, and the read-only bind then always covers it, so no agent can create one)."""


def private_objects(git_common: str, git_dir: str, node_dir: str) -> str:
    """The node's private object directory, where its sandboxed git writes new objects:
    a child's ``<git_dir>/objects`` (inside its worktree's own git dir, which git never
    reads as objects: a worktree's ``objects`` is the common dir's), the root node's
    ``<node_dir>/tmp/objects`` (its git dir is the shared ``.git`` itself)."""
    if git_dir != git_common:
        return str(PurePosixPath(git_dir) / "objects")
    return str(PurePosixPath(node_dir) / "tmp" / "objects")


def object_env(p: SandboxPaths) -> dict[str, str]:
    """The launch's git object variables: ``GIT_OBJECT_DIRECTORY`` the private object
    directory, ``GIT_ALTERNATE_OBJECT_DIRECTORIES`` the shared ``<git_common>/objects``."""
    return {"GIT_OBJECT_DIRECTORY": private_objects(p.git_common, p.git_dir, p.node_dir),
            "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(PurePosixPath(p.git_common) / "objects")}


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def policy(p: SandboxPaths) -> list[Mount]:
    """The mounts of one launch, in order (the module docstring gives the rule)."""
    git = PurePosixPath(p.git_common)
    mounts = [Mount(Op.RO, p.repo)]
    if p.program_dir and not _under(p.program_dir, p.repo):
        mounts.append(Mount(Op.RO_TRY, p.program_dir))
    hide_tmux_dir = p.tmux_dir is not None and not any(
        _under(need, p.tmux_dir) for need in (p.repo, p.worktree, p.git_common, p.program_dir,
                                              p.home) if need)
    hidden = (*p.hide, p.tmux_dir) if hide_tmux_dir and p.tmux_dir else p.hide
    mounts += [Mount(Op.TMPFS, path) for path in hidden]
    if p.program and any(_under(p.program, path) for path in hidden):
        mounts.append(Mount(Op.RO, p.program))  # an agent kept in the data dir still runs
    node = PurePosixPath(p.node_dir)
    root_node = p.worktree == p.repo
    if not root_node:
        # the node dir and the .fractal holding it are mount points: neither can be
        # renamed or replaced, and only the agent's work dirs in it come back writable
        mounts += [Mount(Op.RW, p.worktree),
                   Mount(Op.RO, str(PurePosixPath(p.worktree) / ".fractal")),
                   Mount(Op.RO, p.node_dir)]
    mounts += [Mount(Op.RW_TRY, str(node / name))
               for name in (WORK_DIRS if root_node else CHILD_WORK_DIRS)]
    mounts += [Mount(Op.RO_TRY, str(node / "tmp" / name)) for name in SUPERVISOR_TMP_DIRS]
    heads = git / "refs" / "heads"
    mounts.append(Mount(Op.RW, str(heads)))
    mounts.append(Mount(Op.RW_TRY, _own_reflog(p)))
    if p.git_dir == p.git_common:
        mounts.append(Mount(Op.RW_TRY, str(git / "logs" / "HEAD")))  # the root's own HEAD
    mounts += _ref_dirs(str(heads), p.own_ref, p.branch_refs)
    if p.git_dir != p.git_common:
        mounts.append(Mount(Op.RW, p.git_dir))
    # a mount point: the agent cannot swap it for a link the supervisor would adopt from
    mounts.append(Mount(Op.RW, private_objects(p.git_common, p.git_dir, p.node_dir)))
    mounts += _agent_homes(p, node)
    mounts += [Mount(Op.RO, ref) for ref in sorted(p.branch_refs) if ref != p.own_ref]
    if p.git_dir != p.git_common:
        gitdir = PurePosixPath(p.git_dir)
        mounts += [Mount(Op.RO_TRY, str(gitdir / name))
                   for name in ("commondir", "gitdir", "config.worktree")]
        mounts.append(Mount(Op.RO, str(PurePosixPath(p.worktree) / ".git")))
    mounts += [Mount(Op.RO_TRY, str(node / "config.json")),
               Mount(Op.RO_TRY, str(node / "steps"))]
    if p.relay:
        mounts.append(Mount(Op.RW, p.relay))
    if p.tmux_dir and not hide_tmux_dir and p.tmux_socket:
        mounts.append(Mount(Op.NULL, p.tmux_socket))  # its dir holds what the launch needs
    return mounts


def _own_reflog(p: SandboxPaths) -> str:
    """The node's own branch reflog in the common git dir (``logs/refs/heads/<branch>``)."""
    git = PurePosixPath(p.git_common)
    return str(git / "logs" / PurePosixPath(p.own_ref).relative_to(git))


def no_new_reflogs(env: Mapping[str, str]) -> dict[str, str]:
    """The variables that tell git inside the sandbox not to create a reflog
    (``core.logAllRefUpdates=false``; git still appends to one that exists): a new
    branch's reflog could not be made in the read-only ``logs/refs/heads``, and git
    would refuse the branch. Added after the ``GIT_CONFIG_COUNT`` entries ``env``
    already has (none when the count is not a number)."""
    count = env.get("GIT_CONFIG_COUNT", "0")
    n = int(count) if count.isdigit() else 0
    return {"GIT_CONFIG_COUNT": str(n + 1), f"GIT_CONFIG_KEY_{n}": "core.logAllRefUpdates",
            f"GIT_CONFIG_VALUE_{n}": "false"}


def _agent_homes(p: SandboxPaths, node: PurePosixPath) -> list[Mount]:
    """The node's agent homes over the user's (``AGENT_HOMES``; the module docstring):
    the node's Claude home over ``claude_dir``, its ``.claude.json`` over the user's, its
    cache over ``cache``; then the user's logins (writable, at their own paths), shared
    Claude entries and settings (read-only), each laid inside the node's home."""
    mounts: list[Mount] = []
    claude_home = node / NODE_CLAUDE_HOME
    if p.claude_dir:
        mounts.append(Mount(Op.RW, p.claude_dir, str(claude_home)))
    if p.claude_json:
        mounts.append(Mount(Op.RW, p.claude_json, str(claude_home / CLAUDE_JSON)))
    if p.cache:
        mounts.append(Mount(Op.RW, p.cache, str(node / NODE_CACHE)))
    mounts += [Mount(Op.RW, login) for login in p.logins]
    if p.claude_dir:
        shared = PurePosixPath(p.claude_dir)
        mounts += [Mount(Op.RO_TRY, str(shared / name)) for name in CLAUDE_SHARED]
    if p.home:
        home = PurePosixPath(p.home)
        mounts += [Mount(Op.RO_TRY, str(home / f)) for f in sorted(AGENT_SETTINGS)]
    return mounts


def _ref_dirs(heads: str, own_ref: str, refs: Sequence[str]) -> list[Mount]:
    """The directories under ``heads`` that hold another branch's ref file, shallowest
    first, each bound on itself (a mount point cannot be renamed): read-only, or writable
    when it also holds ``own_ref``."""
    def parents(ref: str) -> list[str]:
        found, at = [], PurePosixPath(ref).parent
        while _under(str(at), heads) and str(at) != heads:
            found.append(str(at))
            at = at.parent
        return found

    own = set(parents(own_ref))
    held = {d for ref in refs if ref != own_ref for d in parents(ref)}
    return [Mount(Op.RW if d in own else Op.RO, d)
            for d in sorted(held, key=lambda d: (d.count("/"), d))]


def bwrap_args(mounts: Sequence[Mount], *, relay: str | None, chdir: str,
               token: str | None = None, setenv: Mapping[str, str] | None = None) -> list[str]:
    """bubblewrap's options for ``mounts`` (without the program name and ``--``): the
    read-only root, ``/dev``, ``/proc`` and a private ``/tmp`` first, then ``mounts`` in
    order, a PID namespace that dies with the launch, no capabilities, ``RELAY_ENV`` set
    to ``relay`` and ``TOKEN_ENV`` to ``token`` (each when given), the variables of
    ``setenv``, and ``chdir`` as the working directory."""
    args = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    for mount in mounts:
        if mount.op is Op.TMPFS:
            args += [mount.op.value, mount.path]
        elif mount.op is Op.NULL:
            args += [Op.RO.value, "/dev/null", mount.path]
        else:
            args += [mount.op.value, mount.source or mount.path, mount.path]
    args += ["--unshare-pid", "--die-with-parent", "--cap-drop", "ALL"]
    if relay:
        args += ["--setenv", RELAY_ENV, relay]
    if token:
        args += ["--setenv", TOKEN_ENV, token]
    for name, value in (setenv or {}).items():
        args += ["--setenv", name, value]
    return [*args, "--chdir", chdir]
