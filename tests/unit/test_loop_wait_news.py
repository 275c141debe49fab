"""A waiting loop's news is used up only by a SYNC that completed, in-process on the fake
clock: a SYNC that met a provider outage, failed or ran into a closed usage window leaves
the child's gate (and its notices) for the next SYNC, so a lead never waits on a gate
nobody showed it."""

from __future__ import annotations

from tests.loopfakes import FakeCall, LoopTree, loop_tree

__all__ = ["loop_tree"]

STEPS = {"01-A.md": "[stub:write=a.txt:a]",
         "02-MERGE.md": "---\nwait: children\n---\n[stub:write=m.txt:m]"}
WAITING = "SYNC while waiting for children"


def _lead(t: LoopTree, marker: str) -> None:
    """A lead whose waiting SYNCs play ``marker``; one child, ``div``, running."""
    t.node("lead", STEPS, "--max-iters", "1", "--wait", "1m", "--iter-timeout", "30m",
           node_md=f"# Task\n\nMerge the children. {marker}\n")
    t.cli("node", "init", "div", "--parent", "lead")
    t.sql_write("UPDATE nodes SET status = 'active' WHERE node = 'main.lead.div'")


def _gate(t: LoopTree) -> None:
    """The child's EXECUTE gate starts waiting, and it posts a notice to its outbox."""
    t.sql_write("INSERT INTO steps (node, run_id, iter_id, step, step_name, status, approved, "
                "metadata, started_at) VALUES ('main.lead.div', (SELECT MAX(run_id) FROM runs), "
                "NULL, 1, 'EXECUTE', 'active', '', 'awaiting approval', "
                "'2026-01-01T00:00:00.000Z')")
    t.sql_write("INSERT INTO messages (message_uuid, node, channel, sender, priority, subject, "
                "data, metadata, created_at) VALUES (lower(hex(randomblob(4))), "
                "'main.lead.div', 'outbox', 'main.lead.div', 5, 'plan ready for review', '', "
                "'', strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))")


def _approve_at_second_sync(t: LoopTree) -> list[FakeCall]:
    """Every waiting SYNC is recorded; the second one approves the gate (as the lead's
    agent would, the first having been cut) and the child then completes."""
    syncs: list[FakeCall] = []

    def on_sync(call: FakeCall) -> None:
        if call.label == WAITING:
            syncs.append(call)
            if len(syncs) == 2:
                t.cli("node", "approve", "lead.div", check=False)
                t.clock.after(5, lambda: t.sql_write(
                    "UPDATE nodes SET status = 'completed' WHERE node = 'main.lead.div'"))
    t.launcher.on_spawn.append(on_sync)
    return syncs


def _wait_row(t: LoopTree) -> tuple[object, ...]:
    (row,) = t.sql("SELECT status, metadata FROM steps WHERE node = 'main.lead' AND "
                   "step_name = 'WAIT'")
    return row


def test_a_sync_cut_by_an_outage_leaves_the_gate_for_the_sync_after_it(
        loop_tree: LoopTree) -> None:
    """The lead's agent alone is on its credential: the SYNC the gate wakes meets a 529,
    the outage is recorded, and the first look past its back-off probes with a SYNC that
    still shows the gate; the agent approves, the child completes, the wait releases and
    the outage is over."""
    t = loop_tree
    _lead(t, "[stub:wait-sync-outage-first=1]")
    syncs = _approve_at_second_sync(t)
    t.clock.after(20, lambda: _gate(t))
    assert t.run("lead") == 0
    assert [c.returncode for c in syncs] == [1, 0], [(c.started_at, c.label) for c in syncs]
    again = syncs[1]
    assert "div EXECUTE (step" in again.prompt  # the gate is shown again
    assert "div: plan ready for review" in again.prompt  # and the notice
    assert again.started_at - syncs[0].started_at >= 30  # after the first back-off
    assert _wait_row(t)[0] == "completed"
    assert t.status("lead") == "completed"
    assert t.sql("SELECT COUNT(*) FROM provider_outages") == [(0,)]
    assert "waits for the SYNC after the outage" in t.pane()


def test_a_failed_sync_leaves_the_news_for_the_next_look(loop_tree: LoopTree) -> None:
    """A waiting SYNC that exits 1 used nothing up: the next look (one window later) runs
    the SYNC again with the gate and the notice in its digest."""
    t = loop_tree
    _lead(t, "[stub:wait-sync-fail-first=1]")
    syncs = _approve_at_second_sync(t)
    t.clock.after(20, lambda: _gate(t))
    assert t.run("lead") == 0
    assert [c.returncode for c in syncs] == [1, 0]
    assert 55 <= syncs[1].started_at - syncs[0].started_at <= 65  # the next window's look
    assert "div EXECUTE (step" in syncs[1].prompt
    assert "div: plan ready for review" in syncs[1].prompt
    assert t.status("lead") == "completed"


def test_a_sync_that_met_a_closed_usage_window_shows_the_same_news_after_it(
        loop_tree: LoopTree) -> None:
    """The SYNC runs again once the usage window reopened; its digest still holds the
    child's notice (it is news since the last completed SYNC, not since the cut one)."""
    t = loop_tree
    _lead(t, "[stub:wait-sync-limit-first=1]")
    syncs = _approve_at_second_sync(t)
    t.clock.after(20, lambda: _gate(t))
    assert t.run("lead") == 0
    assert [c.returncode for c in syncs] == [1, 0]
    assert "div: plan ready for review" in syncs[1].prompt
    assert t.status("lead") == "completed"
