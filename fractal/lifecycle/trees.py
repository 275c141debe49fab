"""``fractal init``: root a tree at the current branch (docs/cli.md, ``fractal init``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fractal.agents.base import split_agent
from fractal.errors import FractalError
from fractal.tree import Tree
from fractal.workspace import git
from fractal.workspace.discovery import checkout_and_main
from fractal.workspace.nodedir import ensure_exclude_block, seed_root_dir, update_config
from fractal.workspace.wiki import PROJECT_TITLE, ensure_wiki


@dataclass(frozen=True)
class TreeInit:
    """The tree that now exists, and whether this call created it."""

    tree: Tree
    created: bool


def init_tree(cwd: Path, agent: str | None = None) -> TreeInit:
    """Make the branch checked out at ``cwd`` the root (user node) of a tree.

    Creates ``.fractal/<branch>/`` (config.json with ``user: true``, the database), the
    ``.git/info/exclude`` block and the project wiki ``wiki/`` (with its ``_index.md``). Idempotent: a second call repairs what is missing
    and keeps the rest. Refuses a detached HEAD, a branch containing ``/``, and a
    working directory inside a node worktree. Raises FractalError / GitError.
    """
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
        split_agent(agent)
    tree = Tree(repo=repo, root=branch)
    created = not tree.config_path.exists()
    seed_root_dir(tree.data_dir)
    updates: dict[str, object] = {"user": True, "root": branch}
    if agent is not None:
        updates["agent"] = agent
    update_config(tree.config_path, updates)
    dirs = git.git_dirs(top)
    ensure_exclude_block(dirs[1] if dirs is not None else git.common_dir(top))
    ensure_wiki(tree.wiki_dir, PROJECT_TITLE)  # the shared project wiki, committed with --init
    from fractal.store.ledger import Ledger

    ledger = Ledger(tree.db_path)
    if created:
        ledger.add_event(branch, "init", actor="operator", status="completed",
                         metadata=git.head_sha(top))
    return TreeInit(tree=tree, created=created)
