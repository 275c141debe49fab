"""``fractal node start`` and ``attach``: host a node's supervisor in tmux.

A fresh start keeps the ``start`` command's environment as the run's (a 0600 file
outside the worktree that the supervisor reads at boot, so API keys never sit in the
argv of a long-lived process nor in the tmux server's environment); ``--continue``
restores it, or replaces it with ``--refresh-env`` (``lifecycle/start/hosting.keep_env``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fractal import tmux
from fractal.agents.base import binary_problem, resolve_route
from fractal.agents.registry import resolve_backend
from fractal.control import latched
from fractal.domain.config import parse_config
from fractal.domain.hosts import elsewhere, host_refusal
from fractal.domain.run.starting import start_refusal
from fractal.domain.states import Move, Status
from fractal.errors import FractalError
from fractal.lifecycle.cleanup.targets import refuse_if_gone
from fractal.lifecycle.context import Context
from fractal.lifecycle.costcaps import refuse_budget_landing
from fractal.lifecycle.heal import heal_if_crashed
from fractal.lifecycle.start.hosting import Hosted, host, session_free, take, undo_env
from fractal.lifecycle.start.preflight import start_warnings
from fractal.lifecycle.steering.latch import refuse_if_braked
from fractal.lifecycle.steering.retune import arm_max_cost
from fractal.lifecycle.steering.signal import await_run
from fractal.store.backend import this_host
from fractal.store.ledger import Ledger
from fractal.tree import NodePaths, Tree, parent_of
from fractal.workspace.nodedir import file_lock, read_config

BOOT_WAIT = 20.0  # seconds `start` waits for the supervisor to take the node


@dataclass(frozen=True)
class Started:
    """A node whose supervisor is running: tmux session and socket, the run id, and
    ``warnings`` about its step files and NODE.md (``startcheck``)."""

    paths: NodePaths
    session: str
    socket: Path
    run_id: int | None
    warnings: tuple[str, ...] = ()
    env_note: str = ""
    """What the start did to the run's kept environment when it says something (a
    ``--refresh-env``'s changed names); empty when it kept or restored it quietly."""


def start_node(ctx: Context, name: str | None, *, continue_mode: bool = False,
               clean: bool = False, max_cost: str | None = None,
               refresh_env: bool = False) -> Started:
    """Validate and launch the node's supervisor in a detached tmux session.

    A fresh start needs status ``idle``; ``continue_mode`` re-arms a settled node, but
    refuses one whose last run landed on its budget unless ``max_cost`` (USD text) arms
    the next run explicitly; that ceiling is rolled back when the launch fails. The re-arm
    (REARM) is undone (DISARM) when the launch fails. The node is taken for the hosted
    supervisor (``hosting.take``: ``active`` under the pane's pid) before this returns, so
    ``run_id`` is None while it boots; where that cannot be done, waits until the
    supervisor has taken the node itself (status leaves ``idle``). A fresh start keeps
    the caller's environment (``ctx.environment``) as the run's; ``continue_mode``
    restores the kept one unless ``refresh_env`` replaces it (``Started.env_note`` names
    the variables that changed); a failed launch puts it back as it was.
    Raises Refused when the acting node may not start ``name``
    (``fractal.domain.authority``), FractalError (wrong status, budget landing, invalid
    config, missing agent, already running, a node another host owns), ConfigError,
    TmuxError.
    """
    tree, branch = ctx.tree, ctx.target(name)
    ctx.authorize("start", branch)
    actor = ctx.actor
    paths = tree.node(branch)
    ledger = ctx.ledger
    known = ledger.node(branch)
    owner = elsewhere(known.host, this_host()) if known is not None else None
    if owner is not None:  # its worktree and pane are on that machine, not here
        raise FractalError(host_refusal("start", branch, owner, this_host()))
    heal_if_crashed(tree, branch)
    refuse_if_gone(tree, ledger.node(branch), "start")
    _refuse_unrecorded_pool(tree, paths)
    _preflight(paths, tree)
    parent = parent_of(branch)
    if parent and parent != tree.root:  # a booting parent opens its run first: the child's
        await_run(tree, ledger, parent)  # run chains on it
    with file_lock(tree.lock_path):
        row = ledger.node(branch)
        status = row.status if row else None
        refusal = start_refusal(branch, status, continuing=continue_mode, root=tree.root,
                                tree_paused=status is Status.PAUSED and latched(tree))
        if refusal is not None:
            raise FractalError(refusal)
        refuse_if_braked(tree, ledger, branch, "start")
        last = ledger.last_run(branch)
        previous = last.run_id if last else 0
        if continue_mode and max_cost is None:
            refuse_budget_landing(tree, branch, last)
        session_free(paths)  # refuses a live (or unknowable) session before anything changes
        undo: Callable[[], None] | None = None
        hosted: Hosted | None = None
        try:
            if continue_mode:
                # deferred: start-up cost (25 modules)
                from fractal.lifecycle.start.continuing import prepare_continue

                prepare_continue(paths, clean=clean, actor=actor)
                ledger.move(branch, Move.REARM).raise_if_refused()
            if max_cost is not None:  # arms the next run; undone when the launch fails
                undo = arm_max_cost(tree, branch, max_cost, ctx)
            # Read before the launch (never raises): the booting supervisor then has the
            # cores to itself while this command finishes.
            warnings = tuple(start_warnings(paths))
            hosted = host(paths, ledger, continue_mode=continue_mode,
                          environ=ctx.environment, refresh=refresh_env)
            taken = take(paths, ledger, hosted, Move.START)
        except BaseException:
            if hosted is not None:  # launched, not taken (a locked database): end it all
                tmux.kill_session(hosted.session, hosted.socket)
                undo_env(paths, hosted.env)
            if undo is not None:
                undo()
            if continue_mode:
                ledger.move(branch, Move.DISARM, to=status)
            raise
        ledger.add_event(branch, "start", actor=actor, status="completed",
                         metadata="continue" if continue_mode else "")
    note = hosted.env.note if hosted.env is not None else ""
    if taken:  # booting under its recorded pid: a failure from here on is the run's own
        return Started(paths=paths, session=hosted.session, socket=hosted.socket,
                       run_id=None, warnings=warnings, env_note=note)
    try:
        run_id = _await_boot(paths, ledger, hosted.session, hosted.socket, previous)
    except FractalError:
        undo_env(paths, hosted.env)
        if continue_mode:  # undo the re-arm, unless the supervisor took the node after all
            ledger.move(branch, Move.DISARM, to=status)
        if undo is not None:
            undo()
        raise
    return Started(paths=paths, session=hosted.session, socket=hosted.socket, run_id=run_id,
                   warnings=warnings, env_note=note)


def _refuse_unrecorded_pool(tree: Tree, paths: NodePaths) -> None:
    """Raise FractalError when ``paths`` is a pool node whose items were never recorded
    (``node pool`` cut off, by a locked database say): its DISPATCH step would fail each
    iteration and the run would settle the node, after which the same ``node pool``
    command, which completes only an idle node, could no longer record them. A stat for
    every other node (the pool row is read only when ``worker-steps/`` is there)."""
    from fractal.workspace.poolseed import WORKER_STEPS  # deferred: start-up cost (2 modules)

    if not (paths.node_dir / WORKER_STEPS).is_dir():
        return
    from fractal.store.pool import PoolStore  # deferred: start-up cost (2 modules)

    if PoolStore(tree.db_path).pool(paths.branch) is None:
        name = paths.branch.rpartition(".")[2]
        raise FractalError(f"pool node {paths.branch} has no items recorded (its `fractal "
                           "node pool` command was cut off); run that command again "
                           f"(`fractal node pool {name} --items FILE --brief FILE`) to "
                           f"record them, then start it, or `fractal node delete "
                           f"{paths.branch}` to drop it")


def _preflight(paths: NodePaths, tree: Tree) -> None:
    config = parse_config(read_config(paths.config_path), source=str(paths.config_path))
    setting = config.agent or str(tree.root_config().get("agent") or "") or None
    backend = resolve_backend(setting, paths.worktree)
    problem = binary_problem(backend.binary(), paths.worktree)
    if problem is not None:
        raise FractalError(f"{problem}; install it, or set the node's agent in "
                           f"{paths.config_path}")
    # An unsupported route is a config mistake: refuse now. What depends on the
    # environment (a route's key) is the supervisor's preflight, which ends the run.
    resolve_route(backend, config.provider, None)


def _await_boot(paths: NodePaths, ledger: object, session: str, socket: Path,
                previous: int) -> int | None:
    """Wait until the supervisor has taken the node; return the id of the run it opened
    (a run newer than ``previous``)."""

    assert isinstance(ledger, Ledger)
    deadline = time.monotonic() + BOOT_WAIT
    while time.monotonic() < deadline:
        row = ledger.node(paths.branch)
        last = ledger.last_run(paths.branch)
        if last is not None and last.run_id > previous:
            return last.run_id
        if row is not None and row.status is not Status.IDLE:
            return None
        if tmux.probe(session, socket) is tmux.Liveness.GONE:
            last = ledger.last_run(paths.branch)
            if last is not None and last.run_id > previous:
                return last.run_id
            raise FractalError(f"the supervisor of {paths.branch} exited before it started; "
                               f"see {paths.supervisor_log}")
        time.sleep(0.05)
    return None


def attach_node(ctx: Context, name: str | None) -> None:
    """Attach the terminal to the node's live pane (replaces this process).

    Refuses unless the acting node may attach to it (``fractal.domain.authority``) and the
    node is active with a live session. Raises Refused, FractalError.
    """
    from fractal.store import reader  # deferred: start-up cost (1 module)

    tree, branch = ctx.tree, ctx.target(name)
    ctx.authorize("attach", branch)
    heal_if_crashed(tree, branch)
    row = reader.node_row(tree.db_path, branch)
    if row is None or row.status is not Status.ACTIVE or not row.tmux_session:
        status = row.status if row else "unregistered"
        transcript = tree.node(branch).pane_log
        seen = f"; what its pane showed is in {transcript}" if transcript.is_file() else ""
        raise FractalError(f"node {branch} is {status}; only an active node has a pane to "
                           f"attach{seen}")
    if not sys.stdin.isatty():
        raise FractalError("attach needs a terminal; to look without one, use "
                           f"`fractal node activity {branch}`, or read "
                           f"{tree.node(branch).pane_log} (the pane's transcript)")
    tmux.attach(row.tmux_session, Path(row.tmux_socket or tmux.socket_path()))
