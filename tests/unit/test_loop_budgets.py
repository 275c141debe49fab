"""Cost ceilings in-process: reserve mode, the per-step budget, advisory warnings, the
untracked-spend warning and live retunes, with the scripted agent reporting its cost.
Moved down from tests/e2e (test_budgets.py, test_budget_agents.py), same assertions."""

from __future__ import annotations

import json

from fractal.assets import mode_text
from fractal.domain.outcome import EXIT_BUDGET_SKIP
from fractal.runtime.kinds.base import OVER_BUDGET
from tests.loopfakes import FakeCall, LoopTree, loop_tree

__all__ = ["loop_tree"]


def _budget_events(t: LoopTree, node: str) -> list[str]:
    return [str(r[0]) for r in t.sql("SELECT metadata FROM events WHERE node = ? AND "
                                     "event = 'budget' ORDER BY event_id", f"main.{node}")]


def _run(t: LoopTree, node: str) -> tuple[object, ...]:
    """(status, exit_code, metadata, max_cost) of the node's newest run."""
    return t.sql("SELECT status, exit_code, metadata, max_cost FROM runs WHERE node = ? "
                 "ORDER BY run_id DESC LIMIT 1", f"main.{node}")[0]


def _once(t: LoopTree, label: str, action: object) -> None:
    done: list[bool] = []

    def hook(call: FakeCall) -> None:
        if not done and label in call.label:
            done.append(True)
            assert callable(action)
            action()
    t.launcher.on_spawn.append(hook)


def test_iteration_cap_runs_the_rest_of_the_iteration_in_reserve(loop_tree: LoopTree) -> None:
    t = loop_tree
    steps = {"01-A.md": "A reserve=$RESERVE_MODE [stub:cost=0.3]\n",
             "02-B.md": "B [stub:cost=0.3]\n",
             # gated: reserve mode never skips a gate, so each iteration's C waits for the
             # parent's approval (given 30 s into the wait)
             "03-C.md": "---\nrequires_approval: true\n---\n"
                        "C reserve=$RESERVE_MODE budget=[$COST_BUDGET]\n"}
    t.node("icap", steps, "--max-cost", "10", "--max-iter-cost", "0.5", "--max-step-cost",
           "0.4", "--max-iters", "2", "--no-sync", "--step-timeout", "1m")

    def approve_at_the_gate(call: FakeCall) -> None:
        if "(C)" in call.label:
            t.clock.after(30, lambda: t.cli("node", "approve", "icap"))
    t.launcher.on_spawn.append(approve_at_the_gate)
    t.run("icap")
    assert t.status("icap") == "completed"
    # the iteration cap is soft: the run goes on to its last iteration
    assert _run(t, "icap")[:3] == ("completed", 0, "Reached max iterations (2)")
    a1, c1, a2, c2 = [c for c in t.launcher.calls if "(B)" not in c.label]
    for a in (a1, a2):  # every iteration starts out of reserve
        assert "reserve=false" in a.prompt and "## Mode: reserve" not in a.prompt
    for c in (c1, c2):
        assert "reserve=true" in c.prompt and mode_text("RESERVE").splitlines()[0] in c.prompt
        assert "RESERVE_MODE" not in c.env  # prompt only
        assert c.env["STEP_BUDGET"] == "0.4" and c.env["MAX_ITER_COST"] == "0.5"
    assert "budget=[$9.4000 remaining of $10 (max $0.5/iter) (warn $0.4/step)]" in c1.prompt
    approved = t.sql("SELECT status, approved FROM steps WHERE step_name = 'C'")
    assert [status for status, _ in approved] == ["completed", "completed"]
    assert all(stamp for _, stamp in approved)  # each held its gate in reserve mode
    events = _budget_events(t, "icap")
    assert len(events) == 2 and all("the iteration spent $0.6000 of its $0.5 cap" in e
                                    for e in events)


def test_budget_landing_books_the_rest_over_budget_and_notices_the_spend(
        loop_tree: LoopTree) -> None:
    t = loop_tree
    steps = {"01-ONE.md": "one [stub:cost=0.3]\n", "02-TWO.md": "two [stub:cost=0.3]\n"}
    t.node("land", steps, "--max-cost", "1", "--no-sync", "--step-timeout", "1m")
    t.run("land")
    assert t.status("land") == "exited"
    reason = "subtree cost budget reached (spent $1.2000 >= $1 max)"
    assert _run(t, "land") == ("exited", 0, reason, 1.0)
    assert t.cli("node", "status", "land").output.strip() == f"exited ({reason})"
    # iteration 1.2's second step ran in reserve: $0.1000 was left, inside the $0.1 reserve
    assert any("inside the $0.1 reserve" in e for e in _budget_events(t, "land"))
    notice = t.sql("SELECT subject, data FROM messages WHERE node = 'main.land'")
    # the run's end notice: the reason, the run's spend, the capped run's figures
    assert notice == [(f"run exited: {reason}",
                       f"{reason}\nrun 1 spent $1.2000\nspent $1.2000 of $1 max")]
    assert t.cli("node", "cost", "spent", "land").output.strip() == "$1.2000"


def test_advisory_step_cap_and_runaway_warnings(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("adv", {"01-BIG.md": "big [stub:cost=0.3]\n"}, "--max-cost", "5",
           "--max-step-cost", "0.1", "--max-iters", "2", "--no-sync")
    t.run("adv")
    assert t.status("adv") == "completed"
    events = _budget_events(t, "adv")
    runaway = [e for e in events if "no timeout is set" in e]
    over = [e for e in events if "over max_step_cost" in e]
    assert len(runaway) == 1 and "set step_timeout" in runaway[0]  # once per run
    assert over == ["BIG cost $0.3000, over max_step_cost $0.1 (the command agent cannot "
                    "enforce it in flight)"] * 2
    assert [r[1] for r in t.steps("adv")] == ["completed", "completed"]


def test_untracked_spend_warns_once_and_reads_untracked(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("free", {"01-A.md": "a\n", "02-B.md": "b\n"}, "--max-cost", "5",
           "--max-iters", "2", "--no-sync", "--step-timeout", "1m")
    t.run("free")
    assert t.status("free") == "completed"
    untracked = [e for e in _budget_events(t, "free") if "cannot trip" in e]
    assert len(untracked) == 1
    spent = t.cli("node", "cost", "spent", "free")
    assert spent.stdout.strip() == "untracked"
    assert "4 launched step(s) recorded no cost (unpriced)" in spent.stderr


def test_a_retry_never_buys_another_attempt_once_the_ceiling_is_crossed(
        loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("broke", {"01-A.md": "[stub:cost=1.5] [stub:fail=1]"}, "--max-cost", "1",
           "--no-sync", "--step-retries", "3", "--step-retry-backoff", "5s",
           "--step-timeout", "1m")
    t.run("broke")
    assert [r[1] for r in t.steps("broke")] == ["failed"]  # no retry past the ceiling
    assert _run(t, "broke")[:3] == ("exited", 0, "subtree cost budget reached (spent $1.5000 "
                                    ">= $1 max)")


def test_live_retune_of_max_iters(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("mi", {"01-A.md": "A\n"}, "--max-iters", "50", "--no-sync")
    out: list[str] = []
    _once(t, "(A)", lambda: out.append(
        t.cli("node", "config", "set", "max_iters=2", cwd=t.worktree("mi")).output))
    t.run("mi")
    assert out[0].strip() == "max_iters: 50 -> 2"
    assert t.status("mi") == "completed"
    assert _run(t, "mi")[:3] == ("completed", 0, "Reached max iterations (2)")
    assert t.sql("SELECT COUNT(*) FROM iterations WHERE node = 'main.mi'") == [(2,)]


def test_live_retune_of_max_cost_and_registry_healing(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("mc", {"01-A.md": "A [stub:cost=0.2]\n"}, "--max-cost", "10", "--no-sync",
           "--step-timeout", "1m", "--max-depth", "null")  # unlimited, not the inherited 1
    seen: dict[str, object] = {}

    def retune() -> None:
        out = t.cli("node", "update", "mc", "--max-cost", "0.3", "--title", "retuned")
        seen["out"] = out.stdout.splitlines()
        seen["row"] = t.sql("SELECT max_cost, title FROM nodes WHERE node = 'main.mc'")
        # a direct edit wins; the loop heals the registry at its next iteration top
        path = t.node_dir("mc") / "config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "max_depth": 2}))
    _once(t, "(A)", retune)
    t.run("mc")
    assert seen["out"] == ["max_cost: 10.0 -> 0.3", 'title: null -> "retuned"',
                           "reserve_budget: 1.0 -> 0.03"]
    assert seen["row"] == [(0.3, "retuned")]
    assert t.status("mc") == "exited"
    assert _run(t, "mc")[:3] == ("exited", 0, "subtree cost budget reached (spent $0.4000 >= "
                                 "$0.3 max)")
    assert t.sql("SELECT COUNT(*) FROM iterations WHERE node = 'main.mc'") == [(2,)]
    assert t.sql("SELECT max_depth FROM nodes WHERE node = 'main.mc'") == [(2,)]
    healed = t.sql("SELECT metadata FROM events WHERE node = 'main.mc' AND event = 'budget' "
                   "AND metadata LIKE 'registry max_depth%'")
    assert healed == [("registry max_depth None differs from config.json 2; healed the "
                       "registry (retune with `fractal node update`)",)]


def test_a_direct_edit_cannot_lift_the_ceiling_the_run_recorded(loop_tree: LoopTree) -> None:
    """Clearing ``max_cost`` in config.json mid-run is not honoured: the run ends on the $1
    its row recorded at its start (a lower edit would count: the lower of the two)."""
    t = loop_tree
    t.node("held", {"01-A.md": "A [stub:cost=1.2]\n"}, "--max-cost", "1", "--no-sync",
           "--max-iters", "3", "--step-timeout", "1m")
    _once(t, "(A)", lambda: t.set_config("held", max_cost=None, reserve_budget=None))
    t.run("held")
    assert _run(t, "held")[:3] == ("exited", 0, "subtree cost budget reached (spent $1.2000 "
                                   ">= $1 max)")
    assert t.sql("SELECT COUNT(*) FROM iterations WHERE node = 'main.held'") == [(1,)]
    assert t.sql("SELECT max_cost FROM runs WHERE node = 'main.held'") == [(1.0,)]


def test_a_raise_through_update_moves_the_recorded_ceiling(loop_tree: LoopTree) -> None:
    """The operator's ``update --max-cost`` moves the open run's record with the file, so
    the raised ceiling counts at once and the run goes on to its last iteration."""
    t = loop_tree
    t.node("raised", {"01-A.md": "A [stub:cost=1.2]\n"}, "--max-cost", "1", "--no-sync",
           "--max-iters", "2", "--step-timeout", "1m")
    _once(t, "(A)", lambda: t.cli("node", "update", "raised", "--max-cost", "10"))
    t.run("raised")
    assert _run(t, "raised")[:3] == ("completed", 0, "Reached max iterations (2)")
    assert t.sql("SELECT max_cost FROM runs WHERE node = 'main.raised'") == [(10.0,)]


def test_live_retune_of_max_iters_by_a_direct_edit(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("tune", {"01-A.md": "[stub:sleep=1]"}, "--no-sync", "--max-iters", "50")
    _once(t, "(A)", lambda: t.set_config("tune", max_iters=2))
    t.run("tune")
    assert t.status("tune") == "completed"
    assert t.sql("SELECT metadata FROM runs") == [("Reached max iterations (2)",)]


def test_a_spent_budget_books_the_steps_it_will_not_pay_for(loop_tree: LoopTree) -> None:
    """Past the ceiling no step is queued: each is booked stopped, exit 125, cost 0.0."""
    t = loop_tree
    t.node("spent", {"01-A.md": "a [stub:cost=1.5]", "02-B.md": "b", "03-C.md": "c"},
           "--max-cost", "1", "--no-sync", "--step-timeout", "1m")
    t.run("spent")
    assert t.sql("SELECT step_name, status, exit_code, metadata, cost FROM steps ORDER BY "
                 "step_id") == [("A", "completed", 0, "", 1.5),
                                ("B", "stopped", EXIT_BUDGET_SKIP, OVER_BUDGET, 0.0),
                                ("C", "stopped", EXIT_BUDGET_SKIP, OVER_BUDGET, 0.0)]
    assert [c.label for c in t.launcher.calls] == ["step 1 of 3 (A)"]
    assert t.iterations("spent")[0][1] == "stopped"
