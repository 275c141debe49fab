"""The ``wait: children`` step frontmatter in-process: the loop (not the agent) holds
before the step until every child of the node has settled, with the fake clock standing
in for the minutes the children take."""

from __future__ import annotations

import pytest

from fractal.domain.outcome import Status
from fractal.domain.waits import WaitingChild, children_waited, wait_reason, waiting_detail
from tests.helpers import FRACTAL_BIN
from tests.loopfakes import FakeCall, LoopTree, loop_tree

__all__ = ["loop_tree"]

STEPS = {"01-A.md": "[stub:write=a.txt:a]",
         "02-MERGE.md": "---\nwait: children\n---\n[stub:write=m.txt:m]"}


def _lead(t: LoopTree, *opts: str, children: tuple[str, ...] = ("c1", "c2")) -> None:
    t.node("lead", STEPS, "--max-iters", "1", *opts)
    for child in children:
        t.cli("node", "init", child, "--parent", "lead")
        _set(t, child, "active")


def _set(t: LoopTree, child: str, status: str) -> None:
    t.sql_write("UPDATE nodes SET status = ? WHERE node = ?", status, f"main.lead.{child}")


def _wait_rows(t: LoopTree) -> list[tuple[object, ...]]:
    return t.sql("SELECT step, status, exit_code, metadata FROM steps WHERE node = "
                 "'main.lead' AND step_name = 'WAIT'")


def test_the_loop_waits_until_every_child_settled(loop_tree: LoopTree) -> None:
    t = loop_tree
    _lead(t, "--no-sync")
    seen: list[str] = []
    t.clock.after(100, lambda: seen.append(t.cli("node", "status", "lead").output))
    t.clock.after(120, lambda: _set(t, "c1", "completed"))
    t.clock.after(180, lambda: _set(t, "c2", "retired"))
    assert t.run("lead") == 0
    assert t.status("lead") == "completed"
    assert _wait_rows(t) == [(2, "completed", 0, "waited for 2 children (3m)")]
    assert [r[:2] for r in t.steps("lead")] == [
        ("A", "completed"), ("WAIT", "completed"), ("MERGE", "completed")]
    merge = [c for c in t.launcher.work_calls() if "(MERGE)" in c.label]
    assert merge and merge[0].started_at >= 1180.0  # MERGE launched after the wait
    assert "waiting for 2 children: c1 active, c2 active" in seen[0]
    assert "WAIT (before MERGE)" in t.pane()


def test_no_live_child_means_no_wait_and_no_row(loop_tree: LoopTree) -> None:
    t = loop_tree
    _lead(t, "--no-sync", children=("done",))
    _set(t, "done", "completed")
    t.run("lead")
    assert _wait_rows(t) == []
    assert t.status("lead") == "completed"


@pytest.mark.parametrize(("verb", "node_status", "reason"), [
    ("stop", "stopped", "stopped waiting for children"),
    ("finish", "completed", "finish requested waiting for children"),
])
def test_stop_or_finish_end_the_wait_at_once(loop_tree: LoopTree, verb: str,
                                             node_status: str, reason: str) -> None:
    t = loop_tree
    _lead(t, "--no-sync", children=("c1",))
    t.clock.after(50, lambda: t.cli("node", verb, "lead"))
    t.clock.after(50, lambda: t.clock.after(30, lambda: _set(t, "c1", "completed")))
    t.run("lead")
    assert _wait_rows(t) == [(2, "stopped", 0, reason)]
    assert t.status("lead") == node_status
    assert "MERGE" not in [r[0] for r in t.steps("lead")]


def test_the_wait_burns_the_iteration_wall(loop_tree: LoopTree) -> None:
    t = loop_tree
    _lead(t, "--no-sync", "--iter-timeout", "2m", children=("slow",))
    t.run("lead")
    assert _wait_rows(t) == [(2, "exited", 124, "timed out waiting for children")]
    assert t.status("lead") == "exited"
    assert t.sql("SELECT metadata FROM iterations")[0][0].startswith("WAIT timed out")
    assert t.sql("SELECT step_name, status, metadata FROM steps WHERE step_name = 'MERGE'") \
        == [("MERGE", "stopped", "failed on WAIT")]
    assert 120 <= t.clock.elapsed() < 180


def test_a_pause_parks_the_wait_and_the_resume_waits_again(loop_tree: LoopTree) -> None:
    t = loop_tree
    _lead(t, "--no-sync", children=("c1",))
    t.clock.after(40, lambda: t.cli("node", "pause", "lead"))
    t.run("lead")
    assert t.status("lead") == "paused"
    assert _wait_rows(t) == [(2, "paused", 0, "waiting for children")]
    t.clock.after(60, lambda: _set(t, "c1", "completed"))
    t.run("lead", resume=True)
    assert t.status("lead") == "completed"
    assert [r[:2] for r in t.steps("lead")] == [
        ("A", "completed"), ("WAIT", "paused"), ("WAIT", "completed"), ("MERGE", "completed")]


def test_a_child_gate_wakes_a_sync_at_once(loop_tree: LoopTree) -> None:
    """SYNC runs every ``wait`` window during the wait; a child's gate that starts waiting
    runs one right away, where the agent approves it."""
    t = loop_tree
    _lead(t, "--wait", "10m", children=("div",))
    syncs: list[tuple[float, str]] = []

    def gate() -> None:
        t.sql_write("INSERT INTO steps (node, run_id, iter_id, step, step_name, status, "
                    "approved, metadata, started_at) VALUES ('main.lead.div', (SELECT MAX(run_id) FROM runs), NULL, 1, 'EXECUTE', "
                    "'active', '', 'awaiting approval', '2026-01-01T00:00:00.000Z')")

    def on_sync(call: FakeCall) -> None:
        if call.is_sync and "waiting for children" in call.label:
            syncs.append((t.clock.elapsed(), call.label))
            if len(syncs) == 1:
                t.cli("node", "approve", "lead.div", check=False)
                t.clock.after(5, lambda: _set(t, "div", "completed"))
    t.launcher.on_spawn.append(on_sync)
    t.clock.after(20, gate)
    t.run("lead")
    assert t.status("lead") == "completed"
    assert len(syncs) == 1 and syncs[0][0] < 60, syncs  # not at the 10m window
    (meta,), = [r[3:] for r in _wait_rows(t)]
    assert meta.startswith("waited for 1 child")


def test_the_sync_while_waiting_names_every_child_and_its_state(loop_tree: LoopTree) -> None:
    """The lead is told why it waits: a SYNC during the wait lists each child the wait
    holds for, the idle one nobody started with the command that starts it."""
    t = loop_tree
    _lead(t, "--wait", "1m", children=("ops", "wrap"))
    _set(t, "wrap", "idle")
    prompts: list[str] = []

    def on_sync(call: FakeCall) -> None:
        if call.is_sync and "waiting for children" in call.label and not prompts:
            prompts.append(call.prompt)
            _set(t, "ops", "completed")
            _set(t, "wrap", "retired")
    t.launcher.on_spawn.append(on_sync)
    t.run("lead")
    assert t.status("lead") == "completed"
    assert len(prompts) == 1
    assert "- Waiting for 2 children (the step runs once each has settled):" in prompts[0]
    assert "  - ops: active\n" in prompts[0]
    assert ("  - wrap: idle, never started: nothing starts it but you, "
            "`" in prompts[0]) and "node start wrap`" in prompts[0]


@pytest.mark.parametrize(("nodes", "expected"), [
    ([("main.a.b", Status.ACTIVE), ("main.a.c", Status.COMPLETED)], ["main.a.b"]),
    ([("main.a.b.x", Status.ACTIVE), ("main.ab", Status.ACTIVE)], []),
    ([("main.a.d", Status.IDLE), ("main.a.e", Status.PAUSED), ("main.a.f", Status.RETIRED),
      ("main.a.g", Status.MISSING)], ["main.a.d", "main.a.e"]),
])
def test_children_waited(nodes: list[tuple[str, Status]], expected: list[str]) -> None:
    assert children_waited("main.a", nodes) == expected


@pytest.mark.parametrize(("n", "seconds", "expected"), [
    (2, 300, "waited for 2 children (5m)"), (1, 45.5, "waited for 1 child (45s)"),
    (3, 89, "waited for 3 children (1m)"), (1, 0, "waited for 1 child (0s)"),
])
def test_wait_reason(n: int, seconds: float, expected: str) -> None:
    assert wait_reason(n, seconds) == expected


def test_waiting_detail() -> None:
    kids = [WaitingChild("main.lead.ops", Status.ACTIVE),
            WaitingChild("main.lead.div", Status.ACTIVE, gate_pending=True)]
    assert waiting_detail(kids) == "waiting for 2 children: div awaiting approval, ops active"


def test_node_init_seeds_the_wait_only_where_a_child_is_allowed(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.cli("node", "init", "spawner", "--max-children", "2")
    t.cli("node", "init", "leaf", "--max-children", "0")
    review = "steps/03-REVIEW.md"
    assert (t.node_dir("spawner") / review).read_text().startswith("---\nwait: children\n")
    assert not (t.node_dir("leaf") / review).read_text().startswith("---")


def test_prompts_carry_the_tree_and_child_modes(loop_tree: LoopTree) -> None:
    """A node whose caps allow a child gets the tree mode with its live limits; a child
    gets its parent, its gated steps and how to message the parent."""
    t = loop_tree
    t.node("lead", {"01-A.md": "work"}, "--no-sync", "--max-iters", "1", "--max-children",
           "3", "--max-depth", "2", "--max-cost", "4")
    t.cli("node", "init", "kid", "--parent", "lead", "--max-children", "0", "--gate", "PLAN",
          "--max-cost", "1")
    _set(t, "kid", "active")
    t.run("lead")
    prompt = t.launcher.calls[0].prompt
    assert "## Mode: tree" in prompt and "## Mode: child" in prompt  # lead's parent is main
    assert "Limits right now: 2 more children, 2 levels below you, budget $4.00 of $4.00" \
        in " ".join(prompt.split())
    assert f"`{FRACTAL_BIN} node init NAME --title \"TITLE\" --task-file FILE --gate EXECUTE " \
        "--max-iters N --max-children 4 --max-depth 1 --max-cost 1.33`" in prompt
    assert t.launcher.calls[0].env["PARENT_BRANCH"] == "main"
    _set(t, "kid", "idle")
    steps = t.node_dir("lead.kid") / "steps"
    for path in steps.iterdir():
        if path.name != "01-PLAN.md":
            path.unlink()
    t.set_config("lead.kid", max_iters=1, sync=False)
    t.clock.after(30, lambda: t.cli("node", "approve", "lead.kid"))
    t.run("lead.kid")
    assert t.status("lead.kid") == "completed"
    call = t.launcher.calls[-1]
    assert call.env["PARENT_BRANCH"] == "main.lead"
    assert "## Mode: tree" not in call.prompt
    assert "You are a child of `main.lead`" in call.prompt
    assert "(they wait for the parent's approval after your turn): PLAN." \
        in " ".join(call.prompt.split())
    assert f'`{FRACTAL_BIN} radio send "TEXT" --parent --subject "SUBJECT" --priority 5`' \
        in call.prompt


@pytest.mark.parametrize(("child", "label"), [
    (WaitingChild("main.lead.ops", Status.ACTIVE), "ops active"),
    (WaitingChild("main.lead.ops", Status.PAUSED), "ops paused"),
    (WaitingChild("main.lead.ops", Status.IDLE), "ops idle"),
    (WaitingChild("main.lead.ops", Status.IDLE, never_started=True), "ops idle, never started"),
    (WaitingChild("main.lead.ops", Status.ACTIVE, never_started=True), "ops active"),
    (WaitingChild("main.lead.ops", Status.ACTIVE, handed_back=True),
     "ops active, merge handed back"),
    (WaitingChild("main.lead.ops", Status.ACTIVE, gate_pending=True, handed_back=True),
     "ops awaiting approval"),
])
def test_a_waited_childs_label_says_what_holds_it(child: WaitingChild, label: str) -> None:
    assert child.label == label
