"""Quiet waits cost nothing, in-process on the fake clock: a waiting loop launches a SYNC
only when the tree holds news since the last SYNC (a child settled, a gate opened, a
message arrived), once per change, each in a fresh session whose prompt stays one SYNC's
size however long the wait."""

from __future__ import annotations

from fractal.domain.outcome import Status
from tests.loopfakes import FakeCall, LoopTree, loop_tree

__all__ = ["loop_tree"]

STEPS = {"01-A.md": "[stub:write=a.txt:a]",
         "02-MERGE.md": "---\nwait: children\n---\n[stub:write=m.txt:m]"}
HOUR = 3600.0
QUIET = 1800.0  # fake seconds of a quiet stretch: 30 one-minute windows (each a look)


def _lead(t: LoopTree, *opts: str, children: tuple[str, ...] = ("c1", "c2")) -> None:
    t.node("lead", STEPS, "--max-iters", "1", *opts)
    for child in children:
        t.cli("node", "init", child, "--parent", "lead")
        _set(t, child, "active")


def _set(t: LoopTree, child: str, status: str) -> None:
    t.sql_write("UPDATE nodes SET status = ? WHERE node = ?", status, f"main.lead.{child}")


def _waiting_syncs(t: LoopTree, what: str = "waiting for children") -> list[FakeCall]:
    return [c for c in t.launcher.calls if c.is_sync and what in c.label]


def _message(t: LoopTree, node: str, subject: str) -> None:
    t.sql_write("INSERT INTO messages (message_uuid, node, channel, sender, priority, subject, "
                "data, metadata, created_at) VALUES (lower(hex(randomblob(4))), ?, 'inbox', "
                "'operator', 5, ?, '', '', strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))",
                node, subject)


def test_a_quiet_wait_launches_nothing_and_each_change_one_sync(loop_tree: LoopTree) -> None:
    """Thirty one-minute windows with the children running launch nothing (the same
    wait ran one SYNC a window before); the first child's end runs exactly one SYNC at
    the next look, the thirty quiet windows after it none, and the second child's end
    releases the wait (the MERGE step's own SYNC follows)."""
    t = loop_tree
    _lead(t, "--wait", "1m")
    t.clock.after(QUIET, lambda: _set(t, "c1", "completed"))
    t.clock.after(2 * QUIET, lambda: _set(t, "c2", "completed"))
    assert t.run("lead") == 0
    assert t.status("lead") == "completed"
    syncs = _waiting_syncs(t)
    assert len(syncs) == 1, [(c.started_at, c.label) for c in syncs]
    assert QUIET <= syncs[0].started_at - 1000.0 <= QUIET + 60  # at the next look
    (wait,), = t.sql("SELECT metadata FROM steps WHERE node = 'main.lead' AND "
                     "step_name = 'WAIT'")
    assert wait == "waited for 2 children (60m)"


def test_a_wait_sync_starts_a_fresh_session_of_bounded_size(loop_tree: LoopTree) -> None:
    """Each child's end is one SYNC; none resumes the iteration's session (or another
    SYNC's), so every prompt is one SYNC's: about the size of the strict SYNC's, the tenth
    as large as the first."""
    t = loop_tree
    children = tuple(f"c{n}" for n in range(10))
    _lead(t, children=(*children, "last"))
    for n, child in enumerate(children):
        t.clock.after((n + 1) * 120.0, lambda c=child: _set(t, c, "completed"))
    t.clock.after(1500.0, lambda: _set(t, "last", "completed"))
    assert t.run("lead") == 0
    syncs = _waiting_syncs(t)
    assert len(syncs) == 10
    assert all(c.env["FRACTAL_SESSION_ID"] == "" for c in syncs)  # nothing resumed
    assert all(c.env["STEP_DETACHED"] == "true" for c in syncs)
    sessions = [t.sql("SELECT session FROM steps WHERE step_id = ?", c.step_id)[0][0]
                for c in syncs]
    iteration = t.sql("SELECT session FROM iterations WHERE node = 'main.lead'")[0][0]
    assert len(set(sessions)) == 10 and iteration not in sessions
    strict = next(c for c in t.launcher.calls if c.label.startswith("SYNC before"))
    sizes = [len(c.prompt.encode()) for c in syncs]
    assert max(sizes) < len(strict.prompt.encode()) + 1024, sizes
    assert max(sizes) - min(sizes) < 512, sizes  # no growth from one SYNC to the next


def test_an_approval_gate_syncs_only_when_a_message_arrives(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("gated", {"01-EXECUTE.md": "---\nrequires_approval: true\n---\n[stub:write=x:x]"},
           "--max-iters", "1")
    t.cli("node", "init", "child", "--parent", "gated")
    t.clock.after(QUIET, lambda: _message(t, "main.gated", "please also add tests"))
    t.clock.after(2 * QUIET, lambda: t.cli("node", "approve", "gated"))
    assert t.run("gated") == 0
    syncs = _waiting_syncs(t, "awaiting EXECUTE")
    assert len(syncs) == 1
    assert QUIET <= syncs[0].started_at - 1000.0 <= QUIET + 60
    assert 'Unread messages: 1 (newest: "please also add tests")' in syncs[0].prompt
    assert t.status("gated") == "completed"


def test_a_finish_drain_syncs_when_a_child_settles(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("lead", {"01-A.md": "[stub:write=a.txt:a]", "02-B.md": "[stub:write=b.txt:b]"},
           "--max-iters", "1")
    for child in ("c1", "c2"):
        t.cli("node", "init", child, "--parent", "lead")
    t.during("(A)", lambda: [_set(t, c, "active") for c in ("c1", "c2")])
    t.during("(A)", lambda: t.cli("node", "finish", "lead"))
    t.clock.after(QUIET, lambda: _set(t, "c1", "completed"))
    t.clock.after(2 * QUIET, lambda: _set(t, "c2", "completed"))
    assert t.run("lead") == 0
    assert len(_waiting_syncs(t, "draining children")) == 1
    assert t.run_row("lead")[0] == Status.COMPLETED.value
