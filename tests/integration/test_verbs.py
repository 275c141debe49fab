"""The verbs as a library: each called in-process with a Context on a real tree (real git,
real SQLite) in a temporary directory, no click and no tmux. Also who may act on whom,
verb by verb, from inside a node's loop."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from fractal.domain.authority import spoken
from fractal.domain.signals import Signal
from fractal.domain.states import Move, Status
from fractal.errors import ConfigError, FractalError, NodeNotFound
from fractal.lifecycle.approve import Approved, approve, pending
from fractal.lifecycle.cleanup.delete import delete
from fractal.lifecycle.cleanup.retire import retire, unretire
from fractal.lifecycle.cleanup.teardown import destroy, reset
from fractal.lifecycle.context import Context, Refused, open_context
from fractal.lifecycle.inbox import ack
from fractal.lifecycle.merge.conflicts import node_conflicts
from fractal.lifecycle.merge.diff import node_diff
from fractal.lifecycle.merge.squash import merge_node
from fractal.lifecycle.notify import configure
from fractal.lifecycle.plans import list_plans, new_plan
from fractal.lifecycle.reads.checks import node_checks
from fractal.lifecycle.reads.nodes import activity, list_nodes, node_status
from fractal.lifecycle.reads.spending import Scope, breakdown, remaining, spent
from fractal.lifecycle.spawn import init_node
from fractal.lifecycle.start.node import start_node
from fractal.lifecycle.steering.brake import brake, release
from fractal.lifecycle.steering.kill import kill
from fractal.lifecycle.steering.resume import resume
from fractal.lifecycle.steering.retune import config_get, config_set, update_node
from fractal.lifecycle.steering.signal import Signalled, cancel_finish, send
from fractal.lifecycle.trees import init_tree
from fractal.lifecycle.usage import reopen, windows
from fractal.store.engine import close_engines
from fractal.store.ledger import Ledger
from fractal.store.windows import Windows
from tests import ledgersql
from tests.helpers import copy_of_tree, make_repo

# On both backends: the verbs (and their loops) against one ledger.
pytestmark = pytest.mark.backend


@pytest.fixture(autouse=True)
def _fresh_engines() -> Iterator[None]:
    yield
    close_engines()


@dataclass(frozen=True)
class Small:
    """``main`` with ``main.a`` (capped at $10), its children ``main.a.b`` and ``main.a.c``,
    and ``main.a.b``'s child ``main.a.b.d``."""

    repo: Path

    def wt(self, branch: str) -> Path:
        return self.repo / ".worktrees" / branch

    def node_dir(self, branch: str) -> Path:
        return self.wt(branch) / ".fractal" / branch

    def ctx(self, where: str | None = None, *, loop: str | None = None) -> Context:
        """The context of a caller in ``where``'s worktree (the repo for None), inside
        ``loop``'s loop when given."""
        cwd = self.repo if where is None else self.wt(where)
        env = {} if loop is None else {"_NODE": str(self.node_dir(loop))}
        return open_context(cwd, env)

    @property
    def db(self) -> Path:
        return self.repo / ".fractal" / "main" / "fractal.db"

    @property
    def ledger(self) -> Ledger:
        return Ledger(self.db)

    def events(self, node: str, event: str) -> list[tuple[str | None, str | None, str]]:
        with ledgersql.connect(self.db) as db:
            rows = db.execute("SELECT actor, status, metadata FROM events WHERE node = ? AND "
                              "event = ? ORDER BY event_id", (node, event)).fetchall()
        return [(a, s, m or "") for a, s, m in rows]

    def snapshot(self) -> tuple[object, ...]:
        """Everything a verb could change: registry rows, signals, runs, configs, branches."""
        with ledgersql.connect(self.db) as db:
            nodes = db.execute("SELECT node, status, max_cost, title FROM nodes "
                               "ORDER BY node").fetchall()
            signals = db.execute("SELECT run_id, signal FROM signals ORDER BY 1, 2").fetchall()
            runs = db.execute("SELECT run_id, node, status FROM runs ORDER BY 1").fetchall()
            steps = db.execute("SELECT step_id, status, approved FROM steps "
                               "ORDER BY 1").fetchall()
        configs = tuple(sorted((p.parent.name, p.read_text())
                               for p in self.repo.glob(".worktrees/*/.fractal/*/config.json")))
        root_config = (self.repo / ".fractal" / "main" / "config.json").read_text()
        worktrees = tuple(sorted(p.name for p in (self.repo / ".worktrees").iterdir()
                                 if not p.name.startswith(".")))
        return nodes, signals, runs, steps, configs, root_config, worktrees


def _build_small(repo: Path) -> None:
    make_repo(repo)
    init_tree(repo, agent="true", max_depth="3")  # main.a.b.d is three levels down
    top = open_context(repo, {})
    init_node(top, "a", {"max_cost": 10.0, "max_iters": 3})
    inside = open_context(repo / ".worktrees" / "main.a", {})
    init_node(inside, "b", {"max_cost": 2.0})
    init_node(top, "c", {"max_cost": 1.0}, parent="a")
    init_node(top, "d", {"max_cost": 0.5}, parent="a.b")


@pytest.fixture
def small(tmp_path: Path) -> Small:
    """The Small tree, built by the verbs once per test process and copied for each test."""
    return Small(copy_of_tree(tmp_path / "repo", "verbs-small", _build_small))


def _activate(small: Small, branch: str) -> int:
    """Make ``branch`` active under a live supervisor (this process), with an open run and
    iteration; return the run id."""
    ledger = small.ledger
    me = psutil.Process()  # a live supervisor as far as the heal can tell
    assert ledger.move(branch, Move.START, supervisor=(me.pid, me.create_time())).ok
    return ledger.open_run(branch, agent="true", max_cost=None, parent_run_id=None)


def _gate(small: Small, branch: str, *, turn_over: bool = True) -> int:
    """Make ``branch`` active with one gated step, awaiting approval once its agent's turn
    is over (``turn_over``: the loop marks the row then); return its step id."""
    run = _activate(small, branch)
    iter_id = small.ledger.open_iteration(branch, run, 1, agent="true", model=None)
    gate = small.ledger.open_step(node=branch, run_id=run, iter_id=iter_id, step=1,
                                  step_name="PLAN", agent="true", model=None, session=None,
                                  gated=True)
    if turn_over:
        small.ledger.mark_awaiting_approval(gate)
    return gate


def _settle(small: Small, branch: str, status: str) -> None:
    """Land idle ``branch`` on the settled ``status`` without a run."""
    assert small.ledger.move(branch, Move.DISARM, to=Status(status)).ok


def _steer(ctx: Context, verb: str, name: str | None) -> list[Signalled]:
    if verb == "kill":
        return kill(ctx, name)
    if verb == "resume":
        return resume(ctx, name)
    return send(ctx, name, Signal(verb))


# --- the context ---------------------------------------------------------------------------

def test_the_context_resolves_caller_target_and_actor(small: Small) -> None:
    root = small.ctx()
    assert (root.caller, root.acting, root.actor) == ("main", "main", "operator")
    assert root.subtree(None) == "main" and root.subtree("c") == "main.a.c"
    assert root.subtree("a.b") == "main.a.b"
    with pytest.raises(FractalError, match="main is the tree's root: it has no loop"):
        root.target(None)
    with pytest.raises(NodeNotFound, match="no node found for 'zz'"):
        root.target("zz")
    node = small.ctx("main.a")
    assert (node.caller, node.actor, node.target(None)) == ("main.a", "main.a", "main.a")


def test_inside_a_loop_the_actor_is_the_loop_node_whatever_the_path(small: Small) -> None:
    posing = small.ctx(None, loop="main.a.b")  # an agent of main.a.b, with --path at the repo
    assert posing.caller == "main" and (posing.acting, posing.actor) == ("main.a.b", "main.a.b")


@pytest.mark.parametrize("loop_node", [
    "/elsewhere/.fractal/main.a",  # not this tree's directory
    "{repo}/.worktrees/main.zz/.fractal/main.zz",  # a node this tree never registered
    "{repo}/.worktrees/main.a",  # the worktree, not the node directory
    "{repo}/.fractal/main",  # the root's data dir: the root has no loop
    "garbage",
])
def test_an_unknown_loop_node_is_refused_never_read_as_the_directory(
        small: Small, loop_node: str) -> None:
    ctx = open_context(small.repo, {"_NODE": loop_node.format(repo=small.repo)})
    with pytest.raises(Refused, match="names no node of the tree rooted at main"):
        _ = ctx.acting
    with pytest.raises(Refused, match="names no node"):
        send(ctx, "a", Signal.STOP)
    assert small.events("main.a", "stop") == []  # refused before anything was written


@pytest.mark.parametrize("loop_node", ["", "  "])
def test_an_empty_loop_node_is_refused_never_read_as_the_operator(
        small: Small, loop_node: str) -> None:
    ctx = open_context(small.repo, {"_NODE": loop_node})
    with pytest.raises(Refused, match="set but empty"):
        _ = ctx.acting
    with pytest.raises(Refused, match="set but empty"):
        send(ctx, "a", Signal.STOP)
    assert small.events("main.a", "stop") == []


def test_a_path_in_an_unregistered_node_worktree_is_refused(small: Small) -> None:
    stray = small.repo / ".worktrees" / "main.zz"
    from tests.helpers import git

    git(small.repo, "worktree", "add", "-q", "-b", "main.zz", str(stray), "main")
    ctx = open_context(stray, {})
    with pytest.raises(Refused, match=r"main\.zz, which is no registered node"):
        _ = ctx.caller
    with pytest.raises(Refused, match="no registered node"):
        kill(ctx, None)


# --- node init ------------------------------------------------------------------------------

def test_init_spawns_under_the_caller_and_records_the_actor(small: Small) -> None:
    rows = {r.node: r for r in small.ledger.nodes()}
    assert set(rows) == {"main.a", "main.a.b", "main.a.c", "main.a.b.d"}
    assert rows["main.a.b"].parent == "main.a" and rows["main.a.b"].status is Status.IDLE
    assert [e[0] for e in small.events("main.a.b", "init")] == ["main.a"]
    assert [e[0] for e in small.events("main.a", "init")] == ["operator"]
    config = json.loads((small.node_dir("main.a.b") / "config.json").read_text())
    assert config["parent"] == "main.a"


def test_a_node_spawns_under_itself_and_its_descendants_only(small: Small) -> None:
    lead = small.ctx("main.a", loop="main.a")
    assert init_node(lead, "e", {"max_cost": 0.1}).paths.branch == "main.a.e"
    assert init_node(lead, "f", {"max_cost": 0.1}, parent="b").paths.branch == "main.a.b.f"
    child = small.ctx("main.a.b", loop="main.a.b")
    for parent in ("a", "c", "main"):
        with pytest.raises(Refused, match="may spawn only itself and its own descendants"):
            init_node(child, "g", {"max_cost": 0.1}, parent=parent)
    assert small.events("main.a.c", "spawn")[-1][:2] == ("main.a.b", "failed")
    assert not any(r.node.endswith(".g") for r in small.ledger.nodes())


# --- update and config ------------------------------------------------------------------------

def test_update_and_config_through_the_context(small: Small) -> None:
    done = update_node(small.ctx(), "b", {"max_cost": "1.5", "title": "lexer"})
    assert "title: null -> \"lexer\"" in [c.line for c in done.changes]
    row = small.ledger.node("main.a.b")
    assert row is not None and (row.max_cost, row.title) == (1.5, "lexer")
    inside = small.ctx("main.a.b")
    assert config_get(inside, "title") == "lexer"
    assert config_set(inside, ["max_iters=4"]).changes[0].line == "max_iters: null -> 4"
    with pytest.raises(ConfigError, match=r"immutable|refused|cannot"):
        config_set(inside, ["parent=main"])


def test_a_loop_sets_only_its_own_config(small: Small) -> None:
    before = small.snapshot()
    posing = small.ctx("main.a.c", loop="main.a.b")  # main.a.b's agent, --path in a sibling
    with pytest.raises(Refused, match="may config only for itself"):
        config_set(posing, ["max_iters=9"])
    assert small.events("main.a.c", "config")[-1][:2] == ("main.a.b", "failed")
    assert small.snapshot() == before


# --- approve and pending ------------------------------------------------------------------------

def test_approve_refusals_are_explained_and_recorded(small: Small) -> None:
    with pytest.raises(Refused, match=re.escape("node main.a.b has no step awaiting approval")):
        approve(small.ctx(), "b")
    step_id = _gate(small, "main.a.b")
    with pytest.raises(Refused, match="may approve only its own direct children"):
        approve(small.ctx(None, loop="main.a.c"), "b")  # a sibling's agent
    with pytest.raises(Refused, match="may approve only its own direct children"):
        approve(small.ctx(None, loop="main.a.b"), "b")  # its own agent
    with pytest.raises(Refused, match=re.escape(f"step {step_id + 1} of main.a.b is not awaiting")):
        approve(small.ctx(), "b", step_id + 1)
    refused = small.events("main.a.b", "approve")
    assert [(a, s) for a, s, _ in refused] == [("operator", "failed"), ("main.a.c", "failed"),
                                               ("main.a.b", "failed"), ("operator", "failed")]
    assert all(m.startswith("refused: ") for _, _, m in refused)


def test_approving_a_gate_re_armed_under_a_new_step_names_the_one_waiting_now(
        small: Small) -> None:
    """An interruption ended the first gate's wait (its row closed, never approved); the
    loop gated its step again under a new step id: approving the old id is refused naming
    the new one and its command, and once that is approved, pointing at the pending list."""
    old = _gate(small, "main.a.b")
    small.ledger.close_step(old, "exited", 1, "awaiting approval; interrupted: SIGHUP")
    run = small.ledger.open_run_of("main.a.b")
    assert run is not None
    now = small.ledger.open_step(node="main.a.b", run_id=run.run_id, iter_id=None, step=1,
                                 step_name="PLAN", agent="true", model=None, session=None,
                                 gated=True)
    small.ledger.mark_awaiting_approval(now)
    with pytest.raises(Refused) as refused:
        approve(small.ctx(), "a.b", old)
    assert str(refused.value) == (
        f"step {old} of main.a.b is not awaiting approval; its gate awaiting approval now "
        f"is step {now} (PLAN): fractal node approve main.a.b {now}")
    assert small.events("main.a.b", "approve")[-1][2] == f"refused: {refused.value}"
    assert approve(small.ctx(), "a.b", now) == Approved("main.a.b", now, "PLAN")
    with pytest.raises(Refused) as late:
        approve(small.ctx(), "a.b", old)
    assert str(late.value) == (
        f"step {old} of main.a.b is not awaiting approval; nothing of it awaits approval "
        "now (`fractal node pending` lists the gates that do)")


def test_the_parent_approves_once_and_pending_lists_the_gate(small: Small) -> None:
    step_id = _gate(small, "main.a.b")
    assert [(r["branch"], r["step_id"]) for r in pending(small.ctx("main.a"), None)] == [
        ("main.a.b", step_id)]
    parent = small.ctx(None, loop="main.a")
    assert approve(parent, "b") == Approved("main.a.b", step_id, "PLAN")
    assert pending(small.ctx("main.a"), None) == []
    with pytest.raises(Refused, match="has no step awaiting approval"):
        approve(parent, "b")
    assert (small.node_dir("main.a.b") / ".wake").exists()


def test_a_late_approval_is_refused_naming_who_approved_and_when(small: Small) -> None:
    """The operator approved the lead's child first: the lead's approve says so."""
    step_id = _gate(small, "main.a.b")
    assert approve(small.ctx(), "a.b") == Approved("main.a.b", step_id, "PLAN")
    with pytest.raises(Refused, match=re.escape(
            f"node main.a.b has no step awaiting approval: step {step_id} (PLAN) was "
            "approved by operator at 20")):
        approve(small.ctx(None, loop="main.a"), "b")
    with pytest.raises(Refused, match=re.escape(
            f"step {step_id} of main.a.b is not awaiting approval: step {step_id} (PLAN) "
            "was approved by operator at")):
        approve(small.ctx(None, loop="main.a"), "b", step_id)


def test_a_gate_whose_agent_still_works_is_not_pending_and_cannot_be_approved(
        small: Small) -> None:
    step_id = _gate(small, "main.a.b", turn_over=False)
    assert pending(small.ctx("main.a"), None) == []
    parent = small.ctx(None, loop="main.a")
    with pytest.raises(Refused, match="has no step awaiting approval"):
        approve(parent, "b")
    small.ledger.mark_awaiting_approval(step_id)  # the agent's turn ends: the wait starts
    assert approve(parent, "b") == Approved("main.a.b", step_id, "PLAN")


# --- cost, checks, plans and reads --------------------------------------------------------------

def test_cost_reads_on_a_tree_that_never_ran(small: Small) -> None:
    report = spent(small.ctx(), "a")
    assert (report.branch, report.usd, report.priced, report.unpriced) == ("main.a", 0.0, 0, 0)
    assert remaining(small.ctx(), "a") == "$10.0000"
    assert remaining(small.ctx(), "a", Scope.ITER) == "no budget"
    rows, unpriced = breakdown(small.ctx(), None)
    assert unpriced == 0 and {r["node"] for r in rows} >= {"main.a", "main.a.b", "main.a.c"}
    with pytest.raises(FractalError, match="the tree's root: it has no runs"):
        spent(small.ctx(), None, Scope.RUN)


def test_checks_of_a_node_that_never_ran(small: Small) -> None:
    report = node_checks(small.ctx("main.a"), None)
    assert (report.node, report.rows, report.trend) == ("main.a", [], [])


def test_plans_belong_to_the_acting_node(small: Small) -> None:
    made = new_plan(small.ctx(None, loop="main.a.b"), "lexer", iter_ref="1.1")
    assert made.parent == small.node_dir("main.a.b") / "plans"
    assert [r["path"] for r in list_plans(small.ctx("main.a.b"))] == [str(made.resolve())]
    assert list_plans(small.ctx("main.a.c")) == []


def test_reads_through_the_context(small: Small) -> None:
    status = node_status(small.ctx(), "b")
    assert (status.branch, status.line) == ("main.a.b", "idle")
    listed = list_nodes(small.ctx("main.a"), None)
    assert [(n["node"], n["status"]) for n in listed] == [
        ("main.a", "idle"), ("main.a.b", "idle"), ("main.a.b.d", "idle"), ("main.a.c", "idle")]
    rows = activity(small.ctx(), "b", None)
    assert [(r["node"], r["event"], r["actor"]) for r in rows] == [("main.a.b", "init", "main.a")]


# --- steering on nodes that are not running ----------------------------------------------------

@pytest.mark.parametrize(("verb", "why"), [
    ("stop", "node main.a.b is {status}; stop needs an active node"),
    ("finish", "node main.a.b is {status}; finish needs an active node"),
    ("pause", "node main.a.b is {status}; pause needs an active node"),
    ("kill", "node main.a.b is {status}; nothing to kill"),
    ("resume", "node main.a.b is {status}; resume needs a paused node"),
], ids=lambda v: v if v in ("stop", "finish", "pause", "kill", "resume") else "")
@pytest.mark.parametrize("status", ["idle", "completed", "killed"])
def test_steering_a_node_that_is_not_running_is_refused_and_recorded(
        small: Small, verb: str, why: str, status: str) -> None:
    if status != "idle":
        _settle(small, "main.a.b", status)
    ctx = small.ctx("main.a")
    with pytest.raises(Refused, match=re.escape(why.format(status=status))):
        _steer(ctx, verb, "b")
    assert small.events("main.a.b", verb)[-1][:2] == ("main.a", "failed")
    row = small.ledger.node("main.a.b")
    assert row is not None and row.status == status  # nothing moved


def test_cancelling_a_finish_needs_an_open_run(small: Small) -> None:
    with pytest.raises(Refused, match=re.escape("node main.a.b has no open run")):
        cancel_finish(small.ctx(), "b")


def test_a_subtree_sweep_with_nothing_running_does_nothing(small: Small) -> None:
    for verb in ("stop", "finish", "pause", "kill", "resume"):
        assert _steer(small.ctx(), verb, None) == []  # the root: a broadcast, no self signal


def test_a_node_steers_its_own_loop_and_its_children(small: Small) -> None:
    run = _activate(small, "main.a.b")
    mine = small.ctx("main.a.b", loop="main.a.b")
    [done] = send(mine, None, Signal.FINISH, "enough")
    assert done.ok and done.branch == "main.a.b"
    assert cancel_finish(mine, None).ok
    [paused] = send(small.ctx(None, loop="main.a"), "b", Signal.PAUSE)
    assert paused.ok
    with ledgersql.connect(small.db) as db:
        assert db.execute("SELECT signal FROM signals WHERE run_id = ?",
                          (run,)).fetchall() == [("pause",)]


def test_the_tree_brake_is_the_operators(small: Small) -> None:
    with pytest.raises(Refused, match="only the operator at the root may brake"):
        brake(small.ctx(None, loop="main.a"), None, "lunch")
    assert not (small.repo / ".fractal" / "main" / ".paused").exists()
    assert brake(small.ctx(), None, "lunch") == []  # nothing running to pause
    with pytest.raises(FractalError, match=re.escape("the tree main is paused")):
        init_node(small.ctx(), "x", {})
    with pytest.raises(Refused, match=re.escape("the tree main is paused")):
        resume(small.ctx(), "b")  # only `fractal resume` lifts the brake
    with pytest.raises(Refused, match="only the operator at the root may release"):
        release(small.ctx("main.a"), None)
    with pytest.raises(FractalError, match=re.escape("no tree rooted at 'other'")):
        brake(small.ctx(), "other", None)
    assert release(small.ctx(), None) == []
    assert init_node(small.ctx(), "x", {}).paths.branch == "main.x"


@pytest.mark.parametrize("continuing", [False, True], ids=["start", "continue"])
def test_starting_a_running_node_says_what_to_do_instead(small: Small, continuing: bool
                                                         ) -> None:
    """An active node is followed or stopped; a paused one is resumed, by `fractal resume`
    while the tree brake is on, else by `fractal node resume`: each refusal names it."""
    _activate(small, "main.a.c")
    with pytest.raises(FractalError, match=re.escape(
            "node main.a.c is active: its run is still going; follow it (`fractal node "
            "status main.a.c`)")):
        start_node(small.ctx(), "a.c", continue_mode=continuing)
    assert small.ledger.move("main.a.c", Move.PARK, to=Status.PAUSED).ok
    with pytest.raises(FractalError, match=re.escape(
            "node main.a.c is paused, so it is resumed, not started: `fractal node resume "
            "main.a.c` resumes its run")):
        start_node(small.ctx(), "a.c", continue_mode=continuing)
    brake(small.ctx(), None, "lunch")  # the tree brake (a file, or a row on PostgreSQL)
    with pytest.raises(FractalError, match=re.escape(
            "node main.a.c is paused, so it is resumed, not started: the tree main is "
            "paused; `fractal resume` lifts the brake and resumes its run")):
        start_node(small.ctx(), "a.c", continue_mode=continuing)
    assert small.ledger.node("main.a.c").status is Status.PAUSED  # nothing moved


def test_the_operator_reopens_a_closed_usage_window_for_a_probe_now(small: Small) -> None:
    """`fractal usage reopen`: a window closed until tomorrow (a misread reset) wakes now,
    so the next look of a waiting node claims the probe; recorded as an event."""
    store = Windows(small.db)
    now = time.time()
    store.close("c0ffee0000000001", "five_hour", now + 86_000, "main.a", now)
    store.close("c0ffee0000000002", "seven_day", now + 600, "main.a.b", now)
    _activate(small, "main.a")
    wake = small.node_dir("main.a") / ".wake"
    wake.unlink(missing_ok=True)
    with pytest.raises(FractalError, match="is ambiguous: it begins c0ffee0000000001, "
                                           "c0ffee0000000002; give more of it"):
        reopen(small.ctx(), "c0ffee")
    with pytest.raises(FractalError, match=re.escape(
            "no usage window for credential 'beef' in this tree (known: c0ffee0000000001, "
            "c0ffee0000000002)")):
        reopen(small.ctx(), "beef")

    done = reopen(small.ctx(), "c0ffee0000000001")
    assert done.changed and done.before.wake_at == pytest.approx(now + 86_005)
    assert done.woken == ("main.a",) and wake.exists()  # its wait is woken at once
    row = store.window("c0ffee0000000001")
    assert row is not None and row.state.value == "closed" and row.resets_at is None
    assert now <= row.wake_at <= time.time()
    assert store.claim_probe("c0ffee0000000001", "main.a", time.time())  # it may probe now
    other = store.window("c0ffee0000000002")  # the other credential's window is untouched
    assert other is not None and other.resets_at == pytest.approx(now + 600)
    (event,) = small.events("main", "usage_reopen")
    assert event[:2] == ("operator", "completed")
    assert event[2].startswith("c0ffee0000000001 (five_hour): was closed until ")

    again = reopen(small.ctx(), "c0ffee0000000001")  # being probed now: left as it is
    assert not again.changed and again.before.prober == "main.a"
    assert len(small.events("main", "usage_reopen")) == 1
    assert [w.credential for w in windows(small.ctx())] == ["c0ffee0000000001",
                                                            "c0ffee0000000002"]


# --- who may act on whom: main.a.b's agent against its parent and its sibling ----------------

VERBS: dict[str, Callable[[Context, str], object]] = {
    "stop": lambda ctx, n: send(ctx, n, Signal.STOP),
    "finish": lambda ctx, n: send(ctx, n, Signal.FINISH),
    "finish_cancel": lambda ctx, n: cancel_finish(ctx, n),
    "pause": lambda ctx, n: send(ctx, n, Signal.PAUSE),
    "resume": lambda ctx, n: resume(ctx, n),
    "kill": lambda ctx, n: kill(ctx, n),
    "start": lambda ctx, n: start_node(ctx, n),
    "update": lambda ctx, n: update_node(ctx, n, {"title": "hijacked"}),
    "spawn": lambda ctx, n: init_node(ctx, "intruder", {"max_cost": 0.1}, parent=n),
    "approve": lambda ctx, n: approve(ctx, n),
    "merge": lambda ctx, n: merge_node(ctx, n),
    "diff": lambda ctx, n: node_diff(ctx, n),
    "conflicts": lambda ctx, n: node_conflicts(ctx, n),
    "retire": lambda ctx, n: retire(ctx, n),
    "unretire": lambda ctx, n: unretire(ctx, n),
    "delete": lambda ctx, n: delete(ctx, n, force=True),
}
TREE_VERBS: dict[str, Callable[[Context], object]] = {
    "reset": reset,
    "destroy": destroy,
    "brake": lambda ctx: brake(ctx, None, None),
    "release": lambda ctx: release(ctx, None),
    "notify": lambda ctx: configure(ctx, "touch owned", None),
    "ack": lambda ctx: ack(ctx, "anything"),
    "usage reopen": lambda ctx: reopen(ctx, "anything"),
}


@pytest.mark.parametrize("target", ["main.a", "main.a.c"], ids=["parent", "sibling"])
@pytest.mark.parametrize("verb", sorted(VERBS))
def test_a_child_loop_acting_on_its_parent_or_sibling_is_refused(
        small: Small, verb: str, target: str) -> None:
    _activate(small, target)  # a live target: a refusal must not be a status refusal
    before = small.snapshot()
    agent = small.ctx("main.a.b", loop="main.a.b")
    with pytest.raises(Refused, match=f"main.a.b may {spoken(verb)}|or an ancestor of {target}"):
        VERBS[verb](agent, target)
    assert small.events(target, verb)[-1][:2] == ("main.a.b", "failed")
    assert small.snapshot() == before


@pytest.mark.parametrize("verb", sorted(TREE_VERBS))
def test_a_loop_may_not_act_for_the_whole_tree(small: Small, verb: str) -> None:
    before = small.snapshot()
    with pytest.raises(Refused, match=f"only the operator at the root may {verb}"):
        TREE_VERBS[verb](small.ctx(None, loop="main.a"))
    assert small.events("main", verb)[-1][:2] == ("main.a", "failed")
    assert small.snapshot() == before


def test_building_and_checking_a_context_imports_no_sqlalchemy(small: Small) -> None:
    """The steering path stays light: resolving who acts, the target and the rule reads
    the registry with the stdlib reader; the ORM is imported only when a verb writes."""
    import subprocess
    import sys

    probe = ("import sys\nfrom pathlib import Path\n"
             "from fractal.lifecycle.context import open_context\n"
             f"ctx = open_context(Path({str(small.wt('main.a'))!r}), "
             f"{{'_NODE': {str(small.node_dir('main.a'))!r}}})\n"
             "assert (ctx.caller, ctx.acting, ctx.actor) == ('main.a', 'main.a', 'main.a')\n"
             "ctx.authorize('stop', ctx.subtree('b'))\n"
             "assert ctx.refusal('stop', 'main') is not None\n"
             "print(sorted(m for m in sys.modules if m.startswith('sqlalchemy')))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, cwd=small.repo).stdout
    assert out.strip() == "[]"
