"""``fractal node init``: spawn a node (see ``docs/cli.md``).

Every value is validated before anything is written; a failure after the worktree
exists rolls the worktree, branch and registry row back, so nothing is left behind.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass

from fractal.agents.base import split_agent
from fractal.domain.config import default_config, resolve_reserve, validate_config
from fractal.domain.nodeinit import inherited_preferences, uncommitted_warning
from fractal.domain.prompt.variables import may_spawn
from fractal.domain.spawncaps import budget_share, inherited_depth, tree_depth
from fractal.errors import ConfigError, FractalError, NodeNotFound
from fractal.lifecycle.caps import check_caps
from fractal.lifecycle.context import Context
from fractal.lifecycle.costcaps import check_child_budget, parent_budget
from fractal.lifecycle.steering.latch import refuse_if_braked
from fractal.tree import NodePaths, Tree, resolve_node, validate_name
from fractal.workspace import git
from fractal.workspace.agenthomes import seed_agent_homes
from fractal.workspace.checkseed import seed_check_gate
from fractal.workspace.nodedir import (
    ensure_exclude_block,
    file_lock,
    inherit_dir,
    read_config,
    seed_children_wait,
    seed_node_dir,
    seed_task_and_gates,
    write_atomic,
)
from fractal.workspace.nodelinks import NODE_DIRS, drop_node_links, real_dirs
from fractal.workspace.seedcommit import seed_commit
from fractal.workspace.wiki import PROJECT_TITLE, WIKI_DIRNAME, ensure_wiki
from fractal.workspace.worktrees import add_worktree, remove_worktree, set_identity

DEFAULT_RESERVE = "10%"


@dataclass(frozen=True)
class NodeInit:
    """The node that was created: its paths, the commit it forked from, and warnings for
    the caller to show (e.g. the parent's uncommitted changes the child does not get)."""

    paths: NodePaths
    parent: str
    fork_sha: str
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class NodeSeed:
    """What ``node init`` writes into the new node beyond the packaged seeds: ``task``
    (NODE.md's Instructions; None keeps the template), ``gates`` (step names, file names
    or numbers that get ``requires_approval: true``) and ``inherit`` (the surfaces of
    ``domain.nodeinit.INHERIT_SURFACES`` copied from the parent)."""

    task: str | None = None
    gates: tuple[str, ...] = ()
    inherit: frozenset[str] = frozenset()


def build_config(settings: Mapping[str, object], *, root: str, parent: str,
                 reserve: str | None) -> dict[str, object]:
    """The full config.json of a new node: defaults, then ``settings``, then lineage.

    ``reserve`` is ``--reserve-budget`` as typed (USD or ``N%``); with ``max_cost`` set
    and no reserve, 10% is materialised (docs/budgets.md). Raises ConfigError
    listing every problem, InvalidValue for a bad reserve or agent.
    """
    config = default_config()
    config.update(settings)
    config.update(root=root, parent=parent, user=False)
    max_cost = config.get("max_cost")
    cap = float(max_cost) if isinstance(max_cost, int | float) and not isinstance(max_cost, bool) \
        else None
    if reserve is not None:
        config["reserve_budget"] = resolve_reserve(reserve, cap)
    elif cap is not None and config.get("reserve_budget") is None:
        config["reserve_budget"] = resolve_reserve(DEFAULT_RESERVE, cap)
    problems = validate_config(config)
    if problems:
        raise ConfigError(problems)
    agent = config.get("agent")
    if isinstance(agent, str):
        split_agent(agent)
    return config


def init_node(ctx: Context, name: str, settings: Mapping[str, object], *,
              parent: str | None = None, reserve: str | None = None,
              start_point: str | None = None, seed: NodeSeed | None = None) -> NodeInit:
    """Create node ``<parent>.<name>``: branch, worktree, seeded data dir (its plans
    directory and memory wiki included), registry row.

    ``parent`` defaults to the node whose worktree holds ``ctx.cwd`` (the root outside
    any node); the acting node may spawn only under itself or its descendants
    (``fractal.domain.authority``: Refused, recorded on the parent). The branch forks
    from ``start_point`` (a commit sha: ``fractal rescue restore --as``) when given, else
    from the base branch's committed tip. A name may be used
    again once its node is deleted: a node directory of the same branch that the fork
    already carries (a deleted namesake's, brought in by a plain ``git merge``) is
    replaced by fresh seeds, so the new node never inherits the old task; only a fork from
    ``start_point`` keeps it (restoring a rescued node is meant to). ``seed`` adds the
    task, gates and inherited surfaces (``--inherit config`` copies the parent's
    preferences under the explicit ``settings``). Limits the settings do not state are
    inherited (``inherited_limits``). Raises InvalidValue, ConfigError, NodeNotFound,
    FractalError (exists; nothing to inherit), GitError.
    """
    tree = ctx.tree
    validate_name(name)
    ledger = ctx.ledger
    known = [row.node for row in ledger.nodes()]
    parent_branch = (resolve_node(parent, [*known, tree.root], tree, near=lambda: ctx.loop_near)
                     if parent else ctx.caller)
    if parent_branch != tree.root and parent_branch not in known:
        raise NodeNotFound(f"parent {parent_branch} is not a registered node")
    ctx.authorize("spawn", parent_branch)
    actor = ctx.actor
    branch = f"{parent_branch}.{name}"
    seed = seed or NodeSeed()
    if seed.inherit & {"steps", "scripts"} and parent_branch == tree.root:
        raise FractalError(f"{tree.root} is the tree's root: it has no committed steps or "
                           "scripts to inherit; drop --inherit steps/scripts (or use config)")
    if "config" in seed.inherit:
        settings = {**inherited_preferences(read_config(tree.node(parent_branch).config_path),
                                            settings), **settings}
    settings = inherited_limits(ctx, branch, settings)
    config = build_config(settings, root=tree.root, parent=parent_branch, reserve=reserve)
    base = config.get("base")
    base_ref = base if isinstance(base, str) else parent_branch
    if not git.branch_exists(tree.repo, base_ref):
        raise FractalError(f"base branch {base_ref!r} does not exist")
    paths = tree.node(branch)
    with file_lock(tree.lock_path):
        if branch in known or git.branch_exists(tree.repo, branch) or paths.worktree.exists():
            raise FractalError(f"node {branch} already exists")
        refuse_if_braked(tree, ledger, branch, "spawn")
        check_caps(tree, ledger, branch)
        check_child_budget(tree, ledger, branch, _usd(config.get("max_cost")))
        dirs = git.git_dirs(tree.repo)
        ensure_exclude_block(dirs[1] if dirs is not None else git.common_dir(tree.repo))
        fork_sha = (git.head_sha(tree.repo, start_point) if start_point
                    else git.branch_tip(tree.repo, base_ref))
        warnings = _unsaved(tree, parent_branch, base_ref, fork_sha)
        add_worktree(tree.repo, branch, paths.worktree, fork_sha)
        registered = False
        try:
            set_identity(paths.worktree, branch)
            drop_node_links(paths.worktree)  # a link there would be followed by every write
            if start_point is None:
                drop_inherited_node_dir(paths)
            real_dirs(paths.worktree, f"{NODE_DIRS}/{branch}")
            seed_node_dir(paths.node_dir)
            for surface in sorted(seed.inherit & {"steps", "scripts"}):
                inherit_dir(paths.worktree / ".fractal" / parent_branch, paths.node_dir,
                            surface)
            exit_check = config.get("exit_check")
            if isinstance(exit_check, str):  # the CHECK gate before REVIEW (docs/checks.md)
                seed_check_gate(paths.node_dir, exit_check)
            seed_task_and_gates(paths.node_dir, seed.task, seed.gates)
            if "steps" not in seed.inherit and may_spawn(_cap(config.get("max_children")),
                                                         _cap(config.get("max_depth"))):
                seed_children_wait(paths.node_dir)  # its REVIEW waits for its children
            ensure_wiki(paths.memory_dir, f"Memory of {branch}", top=paths.worktree)
            seed_agent_homes(paths.node_dir)  # runtime artifacts: never committed
            write_atomic(paths.config_path, json.dumps(config, indent=2, sort_keys=True) + "\n")
            seed_commit(paths.worktree, f"{branch}: init (node seed)")
            # the project wiki's index is generated, never on a branch: each worktree has its own
            ensure_wiki(paths.worktree / WIKI_DIRNAME, PROJECT_TITLE, top=paths.worktree)
            title = config.get("title")
            ledger.register_node(branch, parent=parent_branch,
                                 title=title if isinstance(title, str) else None,
                                 worktree=tree.recorded(paths.worktree), status="idle",
                                 caps={k: _num(config.get(k)) for k in
                                       ("max_cost", "max_depth", "max_children",
                                        "max_descendants")})
            registered = True
            ledger.add_event(branch, "init", actor=actor, status="completed", metadata=fork_sha)
        except BaseException:
            if registered:
                ledger.delete_node(branch)
            remove_worktree(tree.repo, paths.worktree, branch)
            raise
    return NodeInit(paths=paths, parent=parent_branch, fork_sha=fork_sha,
                    warnings=tuple(warnings))


def inherited_limits(ctx: Context, branch: str,
                     settings: Mapping[str, object]) -> dict[str, object]:
    """``settings`` plus the limits a new node ``branch`` inherits where they name none
    (the rules are ``domain.nodeinit``'s): ``max_depth``, its parent's levels minus one
    (the tree's ``max_depth`` for a top-level node, 2 by default); and, spawned from
    inside a node (not by the operator, who states a child's budget or is refused under
    a capped parent), ``max_cost``, a share of the capped parent's remaining budget."""
    tree = ctx.tree
    out = dict(settings)
    parent = branch.rpartition(".")[0]
    if "max_depth" not in out:
        out["max_depth"] = inherited_depth(_levels(tree, parent))
    if "max_cost" not in out and not ctx.is_operator:
        found = parent_budget(tree, ctx.ledger, branch)
        if found is not None:
            out["max_cost"] = budget_share(found.remaining,
                                           _cap(_parent_config(tree, parent).get(
                                               "max_children")))
    return out


def _parent_config(tree: Tree, parent: str) -> dict[str, object]:
    """The parent's config.json (the root's for the root), ``{}`` when unreadable."""
    if parent == tree.root:
        return tree.root_config()
    try:
        return read_config(tree.node(parent).config_path)
    except FractalError:
        return {}


def _levels(tree: Tree, parent: str) -> int | None:
    """Levels ``parent`` may still spawn below itself: the tree's ``max_depth`` for the
    root, else the parent's own ``max_depth`` (None: unlimited, or unreadable)."""
    config = _parent_config(tree, parent)
    if parent == tree.root:
        return tree_depth(config)
    return _cap(config.get("max_depth"))


def _unsaved(tree: Tree, parent: str, base_ref: str, fork_sha: str) -> list[str]:
    """A warning when the child forks from the parent's tip while the parent's node
    directory holds uncommitted edits to its NODE.md, steps or scripts (the child's
    worktree, and ``--inherit``, get the committed versions only)."""
    if base_ref != parent or parent == tree.root:
        return []
    prefix = f".fractal/{parent}/"
    watched = (prefix + "NODE.md", prefix + "steps/", prefix + "scripts/")
    try:
        changed = [p for p in git.changed_paths(tree.worktree_of(parent))
                   if p == watched[0] or p.startswith(watched[1:])]
    except FractalError:
        return []
    return [uncommitted_warning(parent, fork_sha, changed)] if changed else []


def drop_inherited_node_dir(paths: NodePaths) -> bool:
    """Remove ``.fractal/<branch>/`` from a fresh worktree whose fork already carried one
    (a deleted namesake's files, merged into the base by hand); True when one was there.

    The removal is staged, so the seed commit that follows records it. Raises GitError.
    """
    if not os.path.lexists(paths.node_dir):
        return False
    rel = f".fractal/{paths.branch}"
    git.run_git(["rm", "-r", "-q", "--cached", "--ignore-unmatch", "--", rel], paths.worktree)
    if paths.node_dir.is_symlink() or not paths.node_dir.is_dir():
        paths.node_dir.unlink()  # never followed: rmtree would fail on it and leave it
    else:
        shutil.rmtree(paths.node_dir)  # a failure leaves no old file to seed over
    return True


def _usd(value: object) -> float | None:
    number = _num(value)
    return None if number is None else float(number)


def _cap(value: object) -> int | None:
    """A child-count cap from the config (None: unlimited or not a number)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _num(value: object) -> float | int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value
