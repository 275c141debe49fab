"""``fractal init``: root a tree at the current branch (docs/cli.md, ``fractal init``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from fractal.agents.base import split_agent
from fractal.domain.spawncaps import DEFAULT_TREE_DEPTH, parse_tree_depth
from fractal.errors import FractalError, InvalidValue
from fractal.store import backend
from fractal.tree import Tree
from fractal.workspace import git
from fractal.workspace.discovery import checkout_and_main
from fractal.workspace.nodedir import (
    ensure_exclude_block,
    read_config,
    seed_root_dir,
    update_config,
)
from fractal.workspace.wiki import PROJECT_TITLE, ensure_wiki


@dataclass(frozen=True)
class TreeInit:
    """The tree that now exists, whether this call created it, and (for a tree that was
    there) the pieces it found missing and wrote again, as the user would name them
    (``the .git/info/exclude block``, ``wiki/_index.md``); empty when nothing was."""

    tree: Tree
    created: bool
    restored: tuple[str, ...] = ()


def init_tree(cwd: Path, agent: str | None = None, max_depth: str | None = None,
              database: str | None = None,
              environ: Mapping[str, str] | None = None) -> TreeInit:
    """Make the branch checked out at ``cwd`` the root (user node) of a tree.

    ``max_depth`` is ``--max-depth`` as typed: the levels of nodes the tree allows below
    its root (``unlimited``: no limit), written as the root config.json's ``max_depth``;
    a new tree gets ``domain.nodeinit.DEFAULT_TREE_DEPTH`` when it is None, an existing
    one keeps its own. Creates ``.fractal/<branch>/`` (config.json with ``user: true``, the database), the
    ``.git/info/exclude`` block and the project wiki ``wiki/`` (with its ``_index.md``).
    Idempotent: a second call repairs what is missing, keeps the rest and lists what it
    repaired (``TreeInit.restored``); a missing database only while none of the tree's
    nodes is left (else DatabaseMissing, ``domain/dbmissing.py``). Refuses a detached HEAD, a branch containing ``/``,
    a working directory inside a node worktree, and an ``agent`` whose command is a path
    that does not exist (``./agent.sh`` is looked for in the main worktree), before
    writing anything. Raises FractalError / GitError.

    ``database`` (or ``FRACTAL_DATABASE_URL`` in ``environ``, which overrides it) puts the
    ledger in that PostgreSQL database instead of ``fractal.db``: the URL goes in the
    tree's config.json (``database``) without any password (libpq reads that from
    ~/.pgpass or PGPASSWORD; fractal never writes it to a file): one typed in ``database``
    is refused.
    """
    url = _ledger_url(database, environ)
    top, repo = checkout_and_main(cwd)
    if top.resolve() != repo.resolve():
        raise FractalError(f"{top} is a linked worktree; run `fractal init` in the main "
                           f"worktree {repo}")
    branch = git.current_branch(top)
    if branch is None:
        raise FractalError("HEAD is detached; check out the branch that should root the tree")
    if not git.branch_exists(top, branch):
        raise FractalError(f"branch {branch!r} has no commits yet; make a first commit (nodes "
                           "fork from it), then run `fractal init` again")
    if "/" in branch:
        raise FractalError(f"branch {branch!r} contains '/', which fractal cannot use as a "
                           "node name; root the tree on a branch without '/'")
    if agent is not None:
        _refuse_missing_agent(split_agent(agent)[0], top, branch)
    depth = None if max_depth is None else parse_tree_depth(max_depth)
    tree = Tree(repo=repo, root=branch)
    if url is None and not tree.db_path.exists():  # refused before anything is written
        from fractal.store.schema import refuse_missing  # deferred: start-up cost (7 modules)

        refuse_missing(tree.db_path, create=True)
    created = not tree.config_path.exists()
    restored: list[str] = []
    if seed_root_dir(tree.data_dir):
        restored.append(f".fractal/{branch}/.gitignore")
    updates: dict[str, object] = {"user": True, "root": branch}
    before = {} if created else read_config(tree.config_path)
    if any(before.get(key) != value for key, value in updates.items()):
        restored.append(f"config.json's {', '.join(updates)}")
    if agent is not None:
        updates["agent"] = agent
    if max_depth is not None:
        updates["max_depth"] = depth
    elif "max_depth" not in before:
        updates["max_depth"] = DEFAULT_TREE_DEPTH
    if url is not None:
        updates[backend.CONFIG_KEY] = url
    update_config(tree.config_path, updates)
    backend.forget()  # the config may name the ledger's database now
    dirs = git.git_dirs(top)
    if ensure_exclude_block(dirs[1] if dirs is not None else git.common_dir(top)):
        restored.append("the .git/info/exclude block")
    if ensure_wiki(tree.wiki_dir, PROJECT_TITLE):  # its generated index is never committed
        restored.append(f"{tree.wiki_dir.relative_to(repo).as_posix()}/_index.md")
    from fractal.store.ledger import Ledger  # deferred: start-up cost (22 modules)

    if not backend.ledger_exists(tree.db_path):
        restored.append("the database")
    ledger = Ledger(tree.db_path, create=True)  # refused when nodes are left (dbmissing)
    if created:
        ledger.add_event(branch, "init", actor="operator", status="completed",
                         metadata=git.head_sha(top))
    return TreeInit(tree=tree, created=created, restored=() if created else tuple(restored))


def _ledger_url(database: str | None, environ: Mapping[str, str] | None) -> str | None:
    """The PostgreSQL URL the new tree's ledger goes in (the environment's first), or None
    for the SQLite file. Raises InvalidValue for another scheme or a URL with a password."""
    env = (environ or {}).get(backend.URL_ENV)
    if env:  # the environment is no file: its password stays there, the config gets none
        return backend.without_password(backend.check_url(env))
    url = database
    if not url:
        return None
    backend.check_url(url)
    if backend.without_password(url) != url:
        raise InvalidValue("the database URL holds a password, which fractal would write to "
                           "the tree's config.json; leave it out of the URL and put it in "
                           "~/.pgpass (or PGPASSWORD), then run `fractal init` again")
    return url


def _refuse_missing_agent(binary: str, top: Path, branch: str) -> None:
    """Raise InvalidValue when the agent's command ``binary`` is a path (it holds ``/``)
    to nothing: a relative one is looked for in the main worktree ``top``. A bare name
    not on PATH, or a script that is not executable, is left to the CLI's warning (it
    may be installed or fixed before the first start)."""
    if "/" not in binary:
        return
    path = Path(binary) if Path(binary).is_absolute() else top / binary
    if path.exists():
        return
    raise InvalidValue(
        f"agent {binary} does not exist (looked for {path}); create the script (a relative "
        f"path is resolved in each node's worktree, so commit it on {branch}, which nodes "
        "fork from), or name a command on PATH or an absolute path, then run "
        f"`fractal init --agent {binary}` again")
