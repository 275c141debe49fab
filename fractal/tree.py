"""Find the tree from a working directory, name nodes, and lay out their paths.

A tree is rooted at a user node: the branch checked out when ``fractal init`` ran.
Its data dir ``<repo>/.fractal/<root>/`` holds the central database. A node
``<root>.a.b`` lives on that branch, in the worktree ``<repo>/.worktrees/<branch>/``,
with its data dir ``<worktree>/.fractal/<branch>/``. The control plane's files (``.wake``,
``.paused``, the heal locks) are named in ``fractal.control``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from fractal.errors import InvalidValue, NodeNotFound, NotATree

NAME_RE = re.compile(r"[A-Za-z0-9_]{1,64}")
DB_NAME = "fractal.db"


def validate_name(name: str) -> str:
    """Return ``name`` if it is a legal node name (letters, digits, ``_``; 1-64 chars).

    Raises InvalidValue naming the rule otherwise (``.`` separates levels of the tree, so
    it never appears inside a name).
    """
    if name.lower() == "lock":  # git refuses a ref component ending in ".lock"
        raise InvalidValue(f"invalid node name {name!r}: git reserves names ending in '.lock'")
    if not NAME_RE.fullmatch(name):  # whole: `$` would let a trailing newline pass
        raise InvalidValue(
            f"invalid node name {name!r}: use 1-64 letters, digits or '_' "
            "('.' separates levels of the tree and is added for you)")
    return name


def parent_of(branch: str) -> str | None:
    """The dotted parent of ``branch`` (``main.a.b`` -> ``main.a``), None for a root."""
    head, sep, _ = branch.rpartition(".")
    return head if sep else None


@dataclass(frozen=True)
class NodePaths:
    """Every path of one node. ``worktree`` is the repo itself for the root node."""

    tree: Tree
    branch: str
    worktree: Path

    @property
    def node_dir(self) -> Path:
        return self.worktree / ".fractal" / self.branch

    @property
    def config_path(self) -> Path:
        return self.node_dir / "config.json"

    @property
    def steps_dir(self) -> Path:
        return self.node_dir / "steps"

    @property
    def node_md(self) -> Path:
        return self.node_dir / "NODE.md"

    @property
    def setup_script(self) -> Path:
        return self.node_dir / "scripts" / "setup.sh"

    @property
    def setup_log(self) -> Path:
        return self.node_dir / "setup.log"

    @property
    def supervisor_log(self) -> Path:
        return self.node_dir / "supervisor.log"

    @property
    def pane_log(self) -> Path:
        """The pane's transcript (``PaneReporter``): what the pane showed, kept after it."""
        return self.node_dir / "pane.log"

    @property
    def tmp_dir(self) -> Path:
        return self.node_dir / "tmp"

    @property
    def err_dir(self) -> Path:
        return self.tmp_dir / "err"

    @property
    def plans_dir(self) -> Path:
        return self.node_dir / "plans"

    @property
    def memory_dir(self) -> Path:
        return self.node_dir / "memory"

    @property
    def private_dir(self) -> Path:
        """``<root data dir>/private/<branch>/``: the node's files that must stay outside its
        worktree and out of every commit (the run's kept environment)."""
        return self.tree.data_dir / "private" / self.branch

    @property
    def run_env_path(self) -> Path:
        """The environment the node's run keeps (``fractal.workspace.runenv``), 0600."""
        return self.private_dir / "env.json"

    @property
    def session_path(self) -> Path:
        return self.node_dir / ".session"

    def agent_err(self, agent: str) -> Path:
        """``<node_dir>/<agent>.err``: live stderr of the latest launch, for watching a run."""
        return self.node_dir / f"{agent}.err"


@dataclass(frozen=True)
class Tree:
    """One tree in a repository: the repo's main worktree and the root branch."""

    repo: Path
    root: str

    @property
    def data_dir(self) -> Path:
        return self.repo / ".fractal" / self.root

    @property
    def db_path(self) -> Path:
        return self.data_dir / DB_NAME

    @property
    def config_path(self) -> Path:
        return self.data_dir / "config.json"

    @property
    def worktrees_dir(self) -> Path:
        return self.repo / ".worktrees"

    @property
    def lock_path(self) -> Path:
        """The tree-wide lock taken around spawns, starts and the signal verbs: cap checks
        and status checks made under it cannot interleave."""
        return self.worktrees_dir / ".lock"

    @property
    def wiki_dir(self) -> Path:
        return self.repo / "wiki"

    def worktree_of(self, branch: str) -> Path:
        return self.repo if branch == self.root else self.worktrees_dir / branch

    def recorded(self, worktree: Path) -> str:
        """``worktree`` as the registry records it (``nodes.worktree``): relative to this
        clone (``.worktrees/<node>``) when it lies inside it, so a clone elsewhere (another
        path, another host) reads it as its own; else absolute, as given."""
        try:
            return str(worktree.relative_to(self.repo))
        except ValueError:
            return str(worktree)

    def worktree_at(self, recorded: str | None) -> Path | None:
        """A registry ``worktree`` value as a path in this clone: a relative value joined
        with the repository root; an absolute one (a row older than migration 0018 that
        kept it) as it is; None stays None."""
        return None if recorded is None else self.repo / recorded

    def node(self, branch: str) -> NodePaths:
        return NodePaths(tree=self, branch=branch, worktree=self.worktree_of(branch))

    def owns(self, branch: str) -> bool:
        return branch == self.root or branch.startswith(self.root + ".")

    def root_config(self) -> dict[str, object]:
        """The root data dir's config.json (``{}`` when unreadable)."""
        import json  # deferred: start-up cost (json: 5 modules)

        try:
            data = json.loads(self.config_path.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            return {}
        return data if isinstance(data, dict) else {}


def trees_in(repo: Path) -> list[Tree]:
    """Every tree initialised in ``repo`` (a root data dir whose config says ``user: true``).
    A directory whose name starts with ``.`` is never a tree (no branch name does): it is
    a data dir ``destroy`` has renamed to remove it."""
    import json  # deferred: start-up cost (json: 5 modules)
    found: list[Tree] = []
    base = repo / ".fractal"
    if not base.is_dir():
        return found

    for cfg in sorted(base.glob("*/config.json")):
        if cfg.parent.name.startswith("."):
            continue
        try:
            data = json.loads(cfg.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            continue
        if isinstance(data, dict) and data.get("user") is True:
            found.append(Tree(repo=repo, root=cfg.parent.name))
    return found


def find_tree(cwd: Path) -> Tree:
    """The tree the working directory belongs to.

    The caller's branch picks the tree whose root it is or descends from; with a single
    tree in the repo any branch uses it; otherwise the choice is refused.
    Raises NotATree when no tree exists, and GitError outside a git repository.
    """
    return locate(cwd)[0]


def locate(cwd: Path) -> tuple[Tree, Path]:
    """(the tree ``cwd`` belongs to, as ``find_tree`` picks it; the top of the worktree
    holding ``cwd``), so a caller that needs both asks git once. Raises as ``find_tree``."""
    # deferred: start-up cost (17 modules)
    from fractal.workspace.discovery import checkout_and_main

    top, repo = checkout_and_main(cwd)
    return _tree_at(top, repo), top


def _tree_at(top: Path, repo: Path) -> Tree:
    from fractal.workspace import git  # deferred: start-up cost (16 modules)

    trees = trees_in(repo)
    if not trees:
        raise NotATree(f"no fractal tree in {repo}; run `fractal init` on the branch to root it")
    branch = git.current_branch(top)
    if branch is not None:
        owning = [t for t in trees if t.owns(branch)]
        if owning:
            return max(owning, key=lambda t: len(t.root))
    if len(trees) == 1:
        return trees[0]
    roots = ", ".join(t.root for t in trees)
    raise NotATree(f"branch {branch or '(detached)'} belongs to none of the trees here ({roots}); "
                   "run the command from a node's worktree")


def caller_branch(cwd: Path, tree: Tree, top: Path | None = None) -> str:
    """The node (or root) whose worktree contains ``cwd``; the root when it is none of them.
    ``top``: the top of that worktree when the caller knows it already (``locate``)."""
    from fractal.workspace import git  # deferred: start-up cost (16 modules)

    branch = git.current_branch(top if top is not None else git.toplevel(cwd))
    if branch is not None and tree.owns(branch):
        return branch
    return tree.root


def resolve_node(name: str, known: Sequence[str], tree: Tree, *,
                 near: str | Callable[[], str | None] | None = None) -> str:
    """Resolve a user-typed node name against the registered branches ``known``.

    Accepts the full branch, the branch relative to the root (``parser.lexer``), or a
    unique trailing segment run (``lexer``). ``near`` is the node whose loop types the
    name (None outside any loop): a name that is not a full branch is then looked for
    first among ``near``'s own children (``near.NAME``), then among its descendants (a
    unique one ending in ``.NAME``), and only then over the whole tree as outside a loop.
    ``near`` may be a function that finds it: it is called only when the name ends more
    than one branch, since every candidate ends with ``.NAME`` and one or none resolves
    alike near any node (finding the loop's node reads the process's ancestry).
    Raises NodeNotFound naming the candidates when the name is ambiguous or unknown.
    """
    if name in known:
        return name
    if callable(near):
        near = near() if sum(b.endswith("." + name) for b in known) > 1 else None
    if near is not None:
        child = f"{near}.{name}"
        if child in known:
            return child
        below = sorted(b for b in known if b.startswith(near + ".") and b.endswith("." + name))
        if len(below) == 1:
            return below[0]
        if below:
            raise NodeNotFound(f"node name {_shown(name)} is ambiguous below {near}: "
                               + ", ".join(below) + "; type more of the branch")
    rooted = f"{tree.root}.{name}"
    if rooted in known:
        return rooted
    matches = sorted(b for b in known if b.endswith("." + name))
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise NodeNotFound(f"node name {_shown(name)} is ambiguous: " + ", ".join(matches))
    listing = ", ".join(sorted(known)) or "none yet (create one with `fractal node init NAME`)"
    raise NodeNotFound(f"no node found for {_shown(name)}; known nodes: {listing}")


_NAME_SHOWN = 80  # characters of a typed name a refusal echoes


def _shown(name: str) -> str:
    """``name`` quoted for a refusal, cut to _NAME_SHOWN characters (``...`` and its full
    length after a cut): a huge argument never floods the terminal."""
    if len(name) <= _NAME_SHOWN:
        return repr(name)
    return f"{name[:_NAME_SHOWN]!r}... ({len(name)} characters)"
