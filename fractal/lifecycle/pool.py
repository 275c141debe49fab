# Over 400 lines: the pool's verbs share its store, its worker naming and the dispatch round.
"""The worker pool's verbs: ``node pool`` (create), ``pool dispatch`` (one round of the
dispatcher, run by the pool node's own loop), ``pool result`` (a worker reports),
``pool reject`` (the review sends an item back) and ``pool status``.

Every verb takes the command's ``Context``. Who may act (``domain.authority``): ``node
pool`` spawns as ``node init`` does, under the acting node; ``pool result`` is the
worker's own (``SELF``); ``pool reject`` acts on the item's worker, a descendant of the
acting node (the pool node's own review, an ancestor of the pool, or the operator);
``dispatch`` only the pool node's own loop runs. The pool state is written only through
``store.pool.PoolStore``, whose every move applies a rule of ``domain.pool``.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fractal.domain.nodeinit import inherited_preferences
from fractal.domain.pool import (
    MAX_ATTEMPTS,
    Item,
    Next,
    PoolRefused,
    Worker,
    WorkerFacts,
    end_reason,
    next_move,
    parse_items,
    settle,
    worker_name,
    worker_task,
)
from fractal.domain.states import Status
from fractal.errors import FractalError, InvalidValue
from fractal.tree import Tree, parent_of

if TYPE_CHECKING:
    from fractal.lifecycle.context import Context
    from fractal.store.ledger import Ledger
    from fractal.store.pool import PoolStore

__all__ = ["PoolView", "Round", "create_pool", "dispatch", "pool_view", "reject", "report"]

POOL_MAX_ITERS = 3
"""A pool run's iterations unless told otherwise: the first dispatches every item and
reviews, the second dispatches the rejected ones and ends; one more is slack."""


@dataclass(frozen=True)
class Round:
    """One dispatch round: ``next`` is ``wait`` (workers are running), ``review`` (the
    review pass runs now) or ``end`` (``reason``: ``pool: N done, M failed``); ``notes``
    say what the round did, one line each."""

    next: str
    reason: str = ""
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class PoolView:
    """A pool as ``pool status`` shows it."""

    pool: str
    max_workers: int
    review_done: bool
    items: tuple[Item, ...]


# -- create ------------------------------------------------------------------------------


def create_pool(ctx: Context, name: str, items_text: str, brief: str,
                max_workers: int | None, settings: Mapping[str, object], *,
                reserve: str | None = None) -> tuple[Path, str, int, int]:
    """Create pool node ``name`` (a child of the caller's node) with its items, all open.

    ``items_text`` is the items file (JSON array, JSON lines or plain lines); ``brief``
    every worker's instructions; ``settings`` the ``node init`` options of the pool node
    (``max_iters`` defaults to POOL_MAX_ITERS, ``sync`` to off: the dispatcher is no
    agent). Returns (worktree, branch, width used, item count). Raises InvalidValue for a
    bad items file or an empty brief, and whatever ``node init`` raises.

    Resumable: the items are recorded last, so a failure before (a locked database)
    raises FractalError and leaves an idle pool node (``worker-steps/``, no pool row) that
    the same command run again completes (authorised as ``pool`` on it).
    """
    from fractal.lifecycle.spawn import NodeSeed, init_node
    from fractal.store.pool import PoolStore
    from fractal.workspace.backstop import backstop_commit
    from fractal.workspace.poolseed import seed_pool_steps

    try:
        items = parse_items(items_text)
    except ValueError as exc:
        raise InvalidValue(f"bad items file: {exc}") from None
    if not brief.strip():
        raise InvalidValue("the brief is empty: write what every worker should do")
    tree = ctx.tree
    store = PoolStore(tree.db_path)
    branch = f"{ctx.caller}.{name}"
    rows = {row.node: row for row in _ledger(tree).nodes()}
    if store.pool(branch) is not None and branch not in rows:
        store.archive(branch)  # a deleted namesake's items stay on record, renamed
    if branch in rows and _half_made(tree, branch, rows[branch].status, store):
        ctx.authorize("pool", branch)
        paths = tree.node(branch)
    else:
        from fractal.lifecycle.caps import check_pool_depth

        check_pool_depth(tree, _ledger(tree), branch)
        config: dict[str, object] = {"max_iters": POOL_MAX_ITERS, "sync": False,
                                     "max_depth": 1, **settings}
        task = (f"Worker pool of {len(items)} items. fractal dispatches one worker node per "
                f"item and merges each done worker here; this node reviews them once.\n\n"
                f"### The workers' brief\n\n{brief.strip()}\n")
        paths = init_node(ctx, name, config, reserve=reserve, seed=NodeSeed(task=task)).paths
    try:
        seed_pool_steps(paths.node_dir)
        backstop_commit(paths.worktree, subject=f"{paths.branch}: pool steps",
                        branch=paths.branch)
        width = store.create_pool(paths.branch, brief, max_workers, items)
    except (FractalError, OSError) as exc:
        raise FractalError(
            f"pool node {paths.branch} was made but its {len(items)} items were not "
            f"recorded ({exc}); run the same `fractal node pool` command again to record "
            f"them (the node is kept, idle and without items), or `fractal node delete "
            f"{paths.branch}` to drop it") from None
    return paths.worktree, paths.branch, width, len(items)


def _half_made(tree: Tree, branch: str, status: Status, store: PoolStore) -> bool:
    """True when ``branch`` is an idle pool node without a pool row (made, not recorded)."""
    from fractal.workspace.poolseed import WORKER_STEPS

    return (status is Status.IDLE and store.pool(branch) is None
            and (tree.node(branch).node_dir / WORKER_STEPS).is_dir())


def _ledger(tree: Tree) -> Ledger:
    from fractal.store.ledger import Ledger

    return Ledger(tree.db_path)


# -- dispatch ----------------------------------------------------------------------------


def dispatch(ctx: Context, *, resume: bool = False) -> Round:
    """One round of the dispatcher of the pool whose loop runs this command.

    In order: every claimed item's worker is read (``domain.pool.settle``): a live one is
    left alone, a completed one is merged into the pool's branch (a conflict hands it back
    while it has an attempt left, and the attempt fails) and its item finished with the
    worker's reported line (else its last commit subject), any other ending fails the
    attempt; with ``resume`` (the first round of a DISPATCH step: nothing else dispatches
    then) a claim without a run after it follows the resume rule, otherwise it is left to
    the dispatcher that made it, still starting its worker. Then open items
    are claimed while slots are free, each claim before its worker starts. Then the next
    move: ``wait``, ``review`` (recorded as the one review pass) or ``end``.
    Raises FractalError when the caller is not a pool node's loop.
    """
    from fractal.store.pool import PoolStore

    tree = ctx.tree
    pool = ctx.acting
    store = PoolStore(tree.db_path)
    found = store.pool(pool) if ctx.loop_branch == pool else None
    if found is None:
        raise FractalError(f"{pool} is not a pool node: `fractal pool dispatch` is run by a "
                           "pool node's own DISPATCH step")
    brief, width, review_done = found
    ledger = _ledger(tree)
    notes: list[str] = []
    gone: set[str] = set()
    for item, claimed_at in store.claims(pool):
        worker = item.worker or ""
        verdict = _reading(tree, ledger, worker, claimed_at)
        if verdict is Worker.LIVE:
            continue
        try:
            if verdict is Worker.DONE:
                notes.append(_land(ctx, store, pool, item))
            elif verdict is Worker.FAILED:
                run = ledger.last_run(worker)
                why = f"{run.status.value}: {run.meta}" if run is not None else "failed"
                after = store.fail(pool, item.item_id, why)
                notes.append(f"{item.item_id}: attempt {item.attempts} failed ({why}); "
                             f"now {after.status.value}")
            elif resume:
                gone.add(worker)
        except PoolRefused:
            continue  # another dispatcher recorded it first
    for after in store.resume(pool, lambda w: w not in gone) if gone else ():
        notes.append(f"{after.item_id}: its worker never ran this attempt; now "
                     f"{after.status.value}")
    config = _pool_config(tree, pool)
    previous = {i.item_id: i.result for i in store.items(pool)}  # a claim clears it
    while True:  # claim every free slot first, then start the batch side by side
        batch: list[Item] = []
        while (claimed := store.claim_next(pool, lambda i: f"{pool}.{worker_name(i)}")) \
                is not None:
            batch.append(claimed)
        if not batch:
            break
        with ThreadPoolExecutor(max_workers=len(batch)) as starts:
            errors = list(starts.map(lambda i: _try_start(
                ctx, pool, brief, i, config, previous.get(i.item_id, "")), batch))
        for claimed, error in zip(batch, errors, strict=True):
            if error is None:
                notes.append(f"{claimed.item_id}: attempt {claimed.attempts} started "
                             f"({claimed.worker})")
                continue
            after = store.fail(pool, claimed.item_id, f"worker did not start: {error}")
            notes.append(f"{claimed.item_id}: worker did not start ({error}); now "
                         f"{after.status.value}")
    items = store.items(pool)
    move, _ = next_move(items, review_done, width)
    if move is Next.REVIEW:
        store.mark_reviewed(pool)
        return Round("review", end_reason(items), tuple(notes))
    if move is Next.END:
        return Round("end", end_reason(items), tuple(notes))
    return Round("wait", end_reason(items), tuple(notes))


def _reading(tree: Tree, ledger: Ledger, worker: str, claimed_at: str | None) -> Worker:
    """``settle`` over the worker's rows (a worker whose supervisor died is healed first:
    it then reads paused, and resumes with the pool)."""
    from fractal.lifecycle.heal import heal_if_crashed

    row = ledger.node(worker)
    if row is not None and row.status is Status.ACTIVE and heal_if_crashed(tree, worker):
        row = ledger.node(worker)
    run = ledger.last_run(worker) if row is not None else None
    return settle(WorkerFacts(
        status=row.status.value if row is not None else None, claimed_at=claimed_at,
        run_ended=run.ended_at if run is not None else None,
        run_status=run.status.value if run is not None and run.ended_at else None))


def _land(ctx: Context, store: PoolStore, pool: str, item: Item) -> str:
    """Merge a done worker into the pool's branch, then finish its item (a conflict or a
    refused merge fails the attempt). Returns the round's note."""
    from fractal.lifecycle.merge import MergeConflict, merge_node

    worker = item.worker or ""
    result = item.result or _last_subject(ctx.tree, pool, worker) or "done"  # before merging
    try:
        merged = merge_node(ctx, worker, hand_back=item.attempts < MAX_ATTEMPTS)
    except MergeConflict as exc:
        after = store.fail(pool, item.item_id,
                           f"merge conflict in {', '.join(exc.files)}")
        return f"{item.item_id}: merge conflict; now {after.status.value}"
    except FractalError as exc:
        after = store.fail(pool, item.item_id, f"merge refused: {exc}")
        return f"{item.item_id}: merge refused ({exc}); now {after.status.value}"
    if merged.status == "handed-back":
        after = store.fail(pool, item.item_id, f"merge conflict in {', '.join(merged.conflicts)}"
                           f"; handed back to {worker}")
        return f"{item.item_id}: merge conflict handed back to {worker}; now {after.status.value}"
    store.finish(pool, item.item_id, result)
    landed = merged.squash_sha[:10] if merged.squash_sha else "nothing new"
    return f"{item.item_id}: done ({result}); merged {landed}"


def _last_subject(tree: Tree, pool: str, worker: str) -> str:
    """The newest subject of a commit the worker made itself: on its branch and not on the
    pool's (what it inherited when it forked is not its result), and not written by
    fractal (backstop, seed and merge commits start with the worker's or the pool's
    branch). Empty when it made none."""
    from fractal.workspace import git

    try:
        subjects = git.log_subjects(tree.repo, f"{pool}..{worker}", 20)
    except FractalError:
        return ""
    return next((s for s in subjects if not s.startswith((f"{worker}: ", f"{pool}: "))), "")


def _pool_config(tree: Tree, pool: str) -> dict[str, object]:
    from fractal.workspace.nodedir import read_config

    try:
        return dict(read_config(tree.node(pool).config_path))
    except FractalError:
        return {}


def _try_start(ctx: Context, pool: str, brief: str, item: Item,
               pool_config: Mapping[str, object], previous: str) -> str | None:
    """``_start_worker`` in a thread of its own (own ledger); the refusal, or None."""
    try:
        _start_worker(ctx, _ledger(ctx.tree), pool, brief, item, pool_config, previous)
    except FractalError as exc:
        return str(exc)
    return None


def _start_worker(ctx: Context, ledger: Ledger, pool: str, brief: str, item: Item,
                  pool_config: Mapping[str, object], previous: str) -> None:
    """Start the worker of a just-claimed ``item``: create it on its first attempt (the
    pool's preferences, one iteration, the brief plus the item as its task, the pool's
    worker steps), start a new run of a settled one, leave a live one (a hand-back
    re-armed it) alone. Raises FractalError when it cannot."""
    from fractal.lifecycle.costcaps import parent_budget
    from fractal.lifecycle.spawn import NodeSeed, init_node
    from fractal.lifecycle.start import start_node
    from fractal.workspace.backstop import backstop_commit
    from fractal.workspace.nodedir import seed_task_and_gates
    from fractal.workspace.poolseed import copy_worker_steps

    tree = ctx.tree
    branch = item.worker or f"{pool}.{worker_name(item.item_id)}"
    row = ledger.node(branch)
    if row is None:
        settings = {**inherited_preferences(pool_config, {}), "max_iters": 1,
                    "title": f"pool {pool} item {item.item_id}"}
        capped = parent_budget(tree, ledger, branch)
        if capped is not None:  # the pool's ceiling bounds the subtree; the worker may
            settings["max_cost"] = capped.remaining  # use what is left of it
        made = init_node(ctx, worker_name(item.item_id), settings, parent=pool,
                         seed=NodeSeed(task=worker_task(brief, pool, item)))
        if copy_worker_steps(tree.node(pool).node_dir, made.paths.node_dir):
            backstop_commit(made.paths.worktree, subject=f"{branch}: pool worker steps",
                            branch=branch)
        start_node(ctx, branch)
    elif row.status in (Status.ACTIVE, Status.PAUSED):
        return
    elif row.status is Status.IDLE:
        start_node(ctx, branch)
    else:  # a new attempt: its task says how the last one ended
        paths = tree.node(branch)
        seed_task_and_gates(paths.node_dir, worker_task(brief, pool, item, previous), ())
        backstop_commit(paths.worktree, subject=f"{branch}: pool attempt {item.attempts}",
                        branch=branch)
        start_node(ctx, branch, continue_mode=True)


# -- result, reject, status --------------------------------------------------------------


def report(ctx: Context, text: str) -> Item:
    """The worker running this command reports its one-line result. Raises FractalError
    when the caller is not a worker holding a claimed item."""
    from fractal.store.pool import PoolStore

    if not text.strip():
        raise InvalidValue("the result is empty: say in one line what the worker did")
    tree = ctx.tree
    worker = ctx.acting
    pool = parent_of(worker)
    store = PoolStore(tree.db_path)
    if pool is None or store.pool(pool) is None:
        raise FractalError(f"{worker} is not a pool worker: `fractal pool result` is run by "
                           "a worker node of a pool, from its own loop or worktree")
    ctx.authorize("pool result", worker)
    return store.report(pool, worker, text)


def _resolve_pool(ctx: Context, name: str | None) -> tuple[Tree, str]:
    """The pool ``name`` names, or the acting node (its loop, else its worktree)."""
    from fractal.store.pool import PoolStore

    tree = ctx.tree
    branch = ctx.acting if name is None else ctx.target(name)
    if PoolStore(tree.db_path).pool(branch) is None:
        raise FractalError(f"{branch} is not a pool node (`fractal node pool` makes one)")
    return tree, branch


def reject(ctx: Context, item_id: str, reason: str, *, pool: str | None = None) -> Item:
    """The review sends done item ``item_id`` of ``pool`` (default: the caller's node)
    back to the pool: open again with attempts reset to 1. Allowed to the pool node and
    its ancestors. Raises FractalError (not a pool, not allowed, unknown item),
    PoolRefused as FractalError when the item is not done."""
    from fractal.store.pool import PoolStore

    if not reason.strip():
        raise InvalidValue("give the reason: the item's worker reads it on its next attempt")
    tree, branch = _resolve_pool(ctx, pool)
    why = ctx.refusal("pool reject", f"{branch}.{worker_name(item_id)}")
    if why is not None:  # recorded on the pool (the worker may not exist yet)
        raise ctx.refuse("pool reject", branch, f"{ctx.acting} may not reject items of "
                         f"{branch}: only the pool node and its ancestors may ({why})")
    try:
        return PoolStore(tree.db_path).reject(branch, item_id, reason)
    except PoolRefused as exc:
        raise FractalError(f"{exc}; only a done item can be rejected") from None


def pool_view(ctx: Context, name: str | None) -> PoolView:
    """The pool ``name`` (default: the caller's node) and its items, in file order."""
    from fractal.store.pool import PoolStore

    tree, branch = _resolve_pool(ctx, name)
    store = PoolStore(tree.db_path)
    found = store.pool(branch)
    assert found is not None
    return PoolView(branch, found[1], found[2], tuple(store.items(branch)))
