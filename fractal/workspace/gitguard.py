"""What keeps fractal's own git processes from running programs the repository configures.

A node's agent can write anything under the shared ``.git``: a ``core.fsmonitor`` command,
a hook in ``.git/hooks``, a clean filter or a merge driver in ``.git/config``. Git runs
such programs as whoever runs git, so an operator's read-only ``fractal node pending``
would run them with the operator's authority. The rule (docs/security.md): every git
process fractal starts gets configuration overrides in its environment
(``GIT_CONFIG_COUNT`` / ``GIT_CONFIG_KEY_<n>`` / ``GIT_CONFIG_VALUE_<n>``, which git reads
after every config file, so they win over the repository's):

- ``FIXED``: hooks off (``core.hooksPath=/dev/null``), ``core.fsmonitor=false``, no editor,
  no pager, no signing or signature checks, no credential helper, and no descent into a
  nested repository or submodule (``diff.ignoreSubmodules=dirty``, ``submodule.recurse``
  off): git looks at a gitlink's HEAD, never runs ``git status`` inside it, since that
  child git would read the nested repository's own config, whose drivers no override
  here names. Where a command still descends (``git add`` over a gitlink, a submodule's
  ``ignore`` setting in ``.gitmodules``, which wins over this config) the caller passes
  ``--ignore-submodules=dirty`` or leaves the gitlink out (``git.gitlink_excludes``);
- every filter, diff or merge driver *named in the repository's own config files* (the
  common ``config``, the worktree's ``config.worktree`` and every file they could include)
  loses its commands: ``filter.<x>.clean/smudge/process`` and ``diff.<x>.textconv/command``
  become empty, and ``merge.<x>.driver`` becomes git's own three-way file merge. A filter
  the repository marks ``required`` then makes git refuse to stage or diff that path
  (nothing is committed unfiltered). Drivers defined only in the operator's global or
  system config (``git lfs install``) are the operator's own and stay on.

A git process that only reads for display (``live=True``: the inbox's and the dashboard's
diff stats, ``git.run_git(..., live=True)``) also reads the nodes' private object
directories that hold anything as alternates (``GIT_ALTERNATE_OBJECT_DIRECTORIES``: each
worktree git dir's ``objects`` and each root node's ``tmp/objects``,
``domain.sandbox.private_objects``), so a branch tip a live launch committed, not yet
adopted into the shared store, still shows. Every other git process (the default) reads
the shared store alone: whatever writes objects or refs (a merge, a hand-back, a backstop
commit, a rescue ref) must never take an object that adoption has not checked. Git does
not hash a loose object it reads, and it skips writing an object an alternate already
names, so one write with those alternates could make a branch need a forged file
(docs/security.md, "adoption").

Only ``fractal commit`` (the node's own verb, run by its agent or by the operator on
purpose) runs git under ``repository_programs()``, with the repository's hooks and drivers
as configured. The overrides cost no process: the config files are read (at most
``CONFIG_CAP`` bytes each) and their driver names kept while their stamps stay the same.
"""

from __future__ import annotations

import os
from _thread import get_ident  # (threading's own; no import of threading)
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fractal.errors import GitError
from fractal.workspace.capped import read_capped
from fractal.workspace.gitconfigscan import parse_config
from fractal.workspace.gitdirwrite import drop_planted_links

__all__ = ["CONFIG_CAP", "FIXED", "guard_env", "private_stores", "repository_programs"]

FIXED: tuple[tuple[str, str], ...] = (
    ("core.hooksPath", "/dev/null"),
    ("core.fsmonitor", "false"),
    ("core.editor", ":"),
    ("sequence.editor", ":"),
    ("core.pager", "cat"),
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("log.showSignature", "false"),
    ("merge.verifySignatures", "false"),
    ("credential.helper", ""),
    ("diff.ignoreSubmodules", "dirty"),
    ("submodule.recurse", "false"),
    ("status.submoduleSummary", "false"),
    ("fetch.recurseSubmodules", "false"),
    ("push.recurseSubmodules", "no"),
)
"""Overrides every guarded git process gets, whatever the repository says."""

CONFIG_CAP = 1 << 20
"""Bytes of one config file read for driver names (1 MiB); a longer one makes every
guarded git call raise GitError (fail closed: its unread rest could name a driver)."""

_MERGE_FILE = "git merge-file --marker-size=%L %A %O %B"
_DRIVER_KEYS = {"filter": (("clean", ""), ("smudge", ""), ("process", "")),
                "diff": (("textconv", ""), ("command", "")),
                "merge": (("driver", _MERGE_FILE),)}
_INCLUDE_DEPTH = 10


_TRUSTED: set[int] = set()  # the threads inside repository_programs() (no contextvars:
# its import costs more than this needs)
_Stamp = tuple[str, int, int, int]
# the config files' stamps -> (the stamps of every file scanned, the overrides they gave)
_NAMES: dict[tuple[_Stamp, ...], tuple[tuple[_Stamp, ...], tuple[tuple[str, str], ...]]] = {}


@contextmanager
def repository_programs() -> Iterator[None]:
    """Within this block (this thread only) fractal's git runs the repository's hooks,
    fsmonitor and drivers as configured: ``fractal commit``'s pipeline only."""
    me = get_ident()
    outer = me in _TRUSTED
    _TRUSTED.add(me)
    try:
        yield
    finally:
        if not outer:
            _TRUSTED.discard(me)


def guard_env(env: dict[str, str], cwd: Path | None, *, live: bool) -> None:
    """Add the overrides to ``env`` (a git process's whole environment) for a git run in
    ``cwd``, after any ``GIT_CONFIG_COUNT`` entries it already holds (an invalid count is
    replaced); with ``live`` (a read for display, never a write) also the private object
    directories that hold anything as alternates (unless ``env`` names its own object or
    alternate directories). No override is added inside ``repository_programs()``. Every
    symbolic link git would write through in the run's git dir and reflogs is removed
    first, inside it too (``gitdirwrite.drop_planted_links``). Raises
    GitError when one of the repository's config files (or one they include) is longer
    than CONFIG_CAP: its unread rest could name a driver, so no git may run under it."""
    files = [] if cwd is None else _config_files(Path(cwd))
    if files:  # a link a sandboxed agent planted in its git dir is never written through
        drop_planted_links(files[-1].parent, files[0].parent)
    if live and files and "GIT_ALTERNATE_OBJECT_DIRECTORIES" not in env \
            and "GIT_OBJECT_DIRECTORY" not in env:
        private = _private_stores(files[0].parent)
        if private:
            env["GIT_ALTERNATE_OBJECT_DIRECTORIES"] = os.pathsep.join(private)
    if _TRUSTED and get_ident() in _TRUSTED:
        return
    pairs = list(FIXED)
    if files:
        pairs.extend(_driver_overrides(files))
    try:
        start = max(0, int(env.get("GIT_CONFIG_COUNT", "0")))
    except ValueError:
        start = 0
    for i, (key, value) in enumerate(pairs, start):
        env[f"GIT_CONFIG_KEY_{i}"] = key
        env[f"GIT_CONFIG_VALUE_{i}"] = value
    env["GIT_CONFIG_COUNT"] = str(start + len(pairs))


def private_stores(cwd: Path) -> list[str]:
    """The nodes' private object directories of the repository at ``cwd`` that hold
    anything: ``<common>/worktrees/*/objects`` and, beside a ``<repo>/.git`` common dir,
    ``<repo>/.fractal/*/tmp/objects``; [] outside a repository. One directory read and
    a ``stat`` per node, no git process."""
    files = _config_files(Path(cwd))
    return _private_stores(files[0].parent) if files else []


def _private_stores(common: Path) -> list[str]:
    found: list[str] = []
    for top, tail in ((common / "worktrees", ("objects",)),
                      (common.parent / ".fractal", ("tmp", "objects"))):
        if tail[0] == "tmp" and common.name != ".git":
            continue
        try:
            names = sorted(os.listdir(top))
        except OSError:
            continue
        for name in names:
            path = os.path.join(top, name, *tail)
            try:  # objects sit in subdirs: a dir's link count is 2 until one is made
                if os.stat(path).st_nlink != 2:  # (1 on filesystems that do not count)
                    found.append(path)
            except OSError:
                continue
    return found


def driver_overrides(cwd: Path) -> tuple[tuple[str, str], ...]:
    """The (key, value) overrides that switch off every driver the repository at ``cwd``
    names in its own config files; () outside a repository. Raises GitError as
    ``guard_env`` does."""
    files = _config_files(Path(cwd))
    return _driver_overrides(files) if files else ()


def _driver_overrides(files: list[Path]) -> tuple[tuple[str, str], ...]:
    stamps = tuple(_stamp(path) for path in files)
    kept = _NAMES.get(stamps)
    if kept is not None and all(_stamp(Path(s[0])) == s for s in kept[0]):
        return kept[1]
    names: set[tuple[str, str]] = set()
    seen: set[str] = set()
    for path in files:
        _scan(path, names, seen, 0)
    found = tuple((f"{kind}.{name}.{key}", value)
                  for kind, name in sorted(names)
                  for key, value in _DRIVER_KEYS[kind])
    if len(_NAMES) > 64:
        _NAMES.clear()
    _NAMES[stamps] = (tuple(_stamp(Path(p)) for p in seen), found)
    return found


def _stamp(path: Path) -> _Stamp:
    try:
        st = path.stat()
    except OSError:
        return (str(path), -1, -1, -1)
    return (str(path), st.st_ino, st.st_size, st.st_mtime_ns)


def _scan(path: Path, names: set[tuple[str, str]], seen: set[str], depth: int) -> None:
    """Add the drivers ``path`` names to ``names``, following every ``path =`` value as a
    possible include (relative to the file's directory, ``~`` expanded)."""
    key = str(path)
    if key in seen or depth > _INCLUDE_DEPTH:
        return
    seen.add(key)
    try:  # never blocks on a FIFO, never reads more than one byte past CONFIG_CAP
        data = read_capped(path, CONFIG_CAP)
    except OSError:  # missing, unreadable, or not a regular file
        return
    if len(data) > CONFIG_CAP:  # unread, it could name a driver: no git runs under it
        raise GitError(
            f"the git config file {path} is over {CONFIG_CAP // (1 << 20)} MiB; fractal "
            "reads no more of one for the filters and drivers it must switch off, so it "
            "runs no git on this repository. Shorten the file (move what it must hold to "
            "a smaller one it includes), then retry")
    text = data.decode("utf-8", "replace")
    found, includes = parse_config(text)
    names.update(found)
    for value in includes:
        if not value:
            continue
        target = Path(os.path.expanduser(value))
        if not target.is_absolute():
            target = path.parent / target
        _scan(target, names, seen, depth + 1)


def _config_files(cwd: Path) -> list[Path]:
    """The repository config files git reads for a run in ``cwd``: the common dir's
    ``config`` and ``config.worktree`` and the worktree's own ``config.worktree``, found
    by walking up from ``cwd`` to the first ``.git``; [] when there is none (or the
    environment relocates the repository: git is told where, so are we)."""
    gitdir = os.environ.get("GIT_DIR")
    if gitdir:
        git = Path(gitdir)
        common_env = os.environ.get("GIT_COMMON_DIR")
        common = Path(common_env) if common_env else _common_of(git)
        return _files(git, common)
    here = cwd if cwd.is_absolute() else Path.cwd() / cwd
    for top in (here, *here.parents):
        dotgit = top / ".git"
        if dotgit.is_dir():
            return _files(dotgit, dotgit)
        if dotgit.is_file():
            try:
                line = dotgit.read_text(encoding="utf-8", errors="replace")[:4096].strip()
            except OSError:
                return []
            if not line.startswith("gitdir:"):
                return []
            git = Path(line[len("gitdir:"):].strip())
            git = git if git.is_absolute() else top / git
            return _files(git, _common_of(git))
        if (top / "HEAD").is_file() and (top / "objects").is_dir():  # a git dir itself
            return _files(top, _common_of(top))
    return []


def _common_of(git: Path) -> Path:
    try:
        text = (git / "commondir").read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return git
    common = Path(text)
    return common if common.is_absolute() else git / common


def _files(git: Path, common: Path) -> list[Path]:
    paths = [common / "config", common / "config.worktree"]
    if git != common:
        paths.append(git / "config.worktree")
    return paths
