"""Provider outages are waited out in the run, with a doubling back-off, never counted as
failed iterations; usage-window and outage waits keep their wall credit across a park and
a resume. In-process, with the fake clock and the scripted launcher."""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

from tests.loopfakes import LoopTree, loop_tree

__all__ = ["loop_tree"]

_DETAIL = re.compile(r"waiting out a provider outage \(HTTP (\d+), attempt (\d+)\) until "
                     r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ")


def test_an_outage_is_waited_out_and_the_step_completes_in_the_same_run(
        loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("o", {"01-A.md": "[stub:outage-first=3] [stub:write=a.txt:a]"}, "--no-sync",
           "--max-iters", "1", "--step-retries", "0")
    t.set_config("o", max_failed_iters=1)  # one failed iteration would end the run
    assert t.run("o") == 0
    assert t.run_row("o") == ("completed", 0, "Reached max iterations (1)")
    assert t.iterations("o") == [(1, "completed", 0, "")]
    steps = t.steps("o")
    assert [s[1] for s in steps] == ["failed", "failed", "failed", "completed"]
    assert all("overloaded (HTTP 529)" in s[3] for s in steps[:3])
    starts = [c.started_at for c in t.launcher.work_calls()]
    assert [round(b - a) for a, b in itertools.pairwise(starts)] == [30, 60, 120]
    assert t.sql("SELECT COUNT(*) FROM provider_outages") == [(0,)]  # over: the row is gone


def test_the_attempt_count_and_next_instant_are_recorded(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("r", {"01-A.md": "[stub:outage-first=2:500]"}, "--no-sync", "--max-iters", "1")
    seen: list[str] = []
    rows: list[tuple[object, ...]] = []
    inbox: list[dict[str, Any]] = []

    def look() -> None:
        seen.append(t.cli("node", "status", "r").output.strip())
        inbox.extend(i for i in json.loads(t.cli("inbox", "--json").output)
                     if i["kind"] == "outage")
        rows.extend(t.sql("SELECT label, attempts, wake_at, state, closed_by "
                          "FROM provider_outages"))
    t.clock.after(40, look)  # during the second wait (60 s from 30 s)
    assert t.run("r") == 0
    assert len(seen) == 1 and _DETAIL.search(seen[0]), seen
    assert seen[0].startswith("active (waiting out a provider outage (HTTP 500, attempt 2)")
    (item,) = inbox  # the inbox says it too, with the command that cuts the wait short
    assert item["node"] == "main.r" and item["summary"].startswith(seen[0][len("active ("):58])
    assert item["command"] == "fractal node pause main.r && fractal node resume main.r"
    ((label, attempts, wake_at, state, by),) = rows
    assert (label, attempts, state, by) == ("HTTP 500", 2, "waiting", "main.r")
    assert abs(float(str(wake_at)) - (t.clock.epoch0 + 30 + 60)) < 1.0
    waits = t.sql("SELECT status, metadata FROM events WHERE node = 'main.r' AND "
                  "event = 'outage_wait' ORDER BY event_id")
    assert [w[0] for w in waits] == ["started", "completed", "started", "completed"]
    assert [_DETAIL.match(str(w[1])).groups() for w in waits[::2]] == [  # type: ignore[union-attr]
        ("500", "1"), ("500", "2")]
    subjects = [s for (s,) in t.sql("SELECT subject FROM messages WHERE node = 'main.r' "
                                    "ORDER BY rowid")]
    assert subjects[-2:] == ["provider outage over (HTTP 500)",
                             "run completed: Reached max iterations (1)"]
    bodies = [b for (b,) in t.sql("SELECT data FROM messages WHERE node = 'main.r' AND "
                                  "subject LIKE 'waiting out%'")]
    assert bodies and all("fractal node pause main.r && fractal node resume main.r" in b
                          for b in bodies)


def test_the_back_off_doubles_up_to_its_cap(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("c", {"01-A.md": "[stub:outage-first=5]"}, "--no-sync", "--max-iters", "1")
    t.set_config("c", outage_backoff="10s", max_outage_backoff="25s")
    assert t.run("c") == 0
    starts = [c.started_at for c in t.launcher.work_calls()]
    assert [round(b - a) for a, b in itertools.pairwise(starts)] == [
        10, 20, 25, 25, 25]


def test_an_auth_failure_is_not_an_outage(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("a", {"01-A.md": "[stub:outage-first=9:401]"}, "--no-sync", "--step-retries", "0")
    t.set_config("a", max_failed_iters=2)
    t.run("a")
    assert t.run_row("a")[2].startswith("2 consecutive iterations failed")
    assert t.sql("SELECT COUNT(*) FROM events WHERE event = 'outage_wait'") == [(0,)]


def test_a_node_on_the_same_credential_waits_for_the_outage(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("a", {"01-A.md": "[stub:outage-first=1]"}, "--no-sync", "--max-iters", "1")
    credentials: list[str] = []
    t.clock.after(5, lambda: credentials.extend(
        c for (c,) in t.sql("SELECT credential FROM provider_outages")))
    t.run("a")  # its outage is over: the row is gone, the credential seen meanwhile
    t.node("b", {"01-A.md": "[stub:write=b.txt:b]"}, "--no-sync", "--max-iters", "1")
    t.sql_write("INSERT INTO provider_outages (credential, label, attempts, wake_at, state, "
                "closed_by, updated_at) VALUES (?, 'HTTP 529', 3, ?, 'waiting', "
                "'main.other', '')", credentials[0], t.clock.time() + 200)
    calls, began = len(t.launcher.calls), t.clock.monotonic()
    assert t.run("b") == 0
    (probe,) = t.launcher.calls[calls:]
    assert probe.started_at - began >= 200  # no API call before the wake instant
    assert [s[:2] for s in t.steps("b")] == [("A", "completed")]  # no failed row
    assert t.sql("SELECT COUNT(*) FROM provider_outages") == [(0,)]  # its probe ended it


def test_a_stop_ends_the_outage_wait(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("s", {"01-A.md": "[stub:outage-first=9]"}, "--no-sync", "--max-iters", "1")
    t.clock.after(10, lambda: t.cli("node", "stop", "s"))
    t.run("s")
    assert t.run_row("s")[:2] == ("stopped", 0)
    assert len(t.launcher.work_calls()) == 1


def test_a_resume_cuts_a_parked_outage_wait_short(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("p", {"01-A.md": "[stub:outage-first=1]"}, "--no-sync", "--max-iters", "1")
    t.set_config("p", outage_backoff="10m")
    t.clock.after(30, lambda: t.cli("node", "pause", "p"))
    t.run("p")
    assert t.status("p") == "paused"
    parked_at = t.clock.monotonic()
    assert t.run("p", resume=True) == 0
    assert t.run_row("p") == ("completed", 0, "Reached max iterations (1)")
    assert t.launcher.work_calls()[-1].started_at - parked_at < 60  # not at the 10 min wake


def test_a_usage_wait_keeps_its_credit_across_a_park(loop_tree: LoopTree) -> None:
    t = loop_tree
    # the window reopens 120 s after the first launch; a 1 min run wall; parked at 70 s
    t.node("u", {"01-A.md": "[stub:limit-first=1] [stub:write=a.txt:a]"}, "--no-sync",
           "--max-iters", "1", "--timeout", "1m")
    t.clock.after(70, lambda: t.cli("node", "pause", "u"))
    t.run("u")
    assert t.status("u") == "paused"
    assert t.run("u", resume=True, parked_for=10) == 0
    assert t.run_row("u") == ("completed", 0, "Reached max iterations (1)")
    assert [s[1] for s in t.steps("u")][-1] == "completed"


def test_an_outage_wait_keeps_its_credit_across_a_park(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("w", {"01-A.md": "[stub:outage-first=2] [stub:write=a.txt:a]"}, "--no-sync",
           "--max-iters", "1", "--timeout", "1m")
    t.set_config("w", outage_backoff="50s")
    t.clock.after(70, lambda: t.cli("node", "pause", "w"))  # in the second wait (100 s)
    t.run("w")
    assert t.status("w") == "paused"
    assert t.run("w", resume=True, parked_for=10) == 0
    assert t.run_row("w") == ("completed", 0, "Reached max iterations (1)")
    assert t.iterations("w") == [(1, "completed", 0, "")]


def test_a_wait_its_supervisor_died_in_is_credited_up_to_the_heals_park(
        loop_tree: LoopTree) -> None:
    from datetime import UTC, datetime

    from fractal.runtime.adopt import WAIT_EVENTS
    from fractal.runtime.waitcredit import wait_credits
    from fractal.store.ledger import Ledger
    from fractal.store.timefmt import format_ts

    t = loop_tree
    t.node("k", {"01-A.md": "a"}, "--no-sync", "--max-iters", "1")
    t.run("k")
    ((run_id, iter_id),) = t.sql("SELECT run_id, iter_id FROM iterations")
    ledger, at = Ledger(t.db), 1_800_000_000.0

    def event(name: str, status: str, meta: str, offset: float) -> None:
        eid = ledger.add_event("main.k", name, actor="loop", status=status, metadata=meta,
                               run_id=run_id, iter_id=iter_id)
        t.sql_write("UPDATE events SET created_at = ? WHERE event_id = ?",
                    format_ts(datetime.fromtimestamp(at + offset, UTC)), eid)
    event("usage_wait", "started", "waiting for usage window until 01:00:00Z", 0)
    event("wait_credit", "completed", "12.500", 12.5)  # a wait that ended: its record
    event("usage_wait", "completed", "usage window reopened", 12.5)
    event("outage_wait", "started", "waiting out a provider outage (...)", 100)
    event("pause", "completed", "parked interrupted: supervisor lost", 140)  # the heal
    assert wait_credits(ledger, "main.k", run_id, WAIT_EVENTS) == 12.5 + 40
    assert wait_credits(ledger, "main.k", run_id, WAIT_EVENTS, iter_id) == 12.5 + 40
    assert wait_credits(ledger, "main.k", run_id, WAIT_EVENTS, iter_id + 1) == 0.0


def test_an_outage_the_strict_sync_meets_is_waited_out_before_the_step(
        loop_tree: LoopTree) -> None:
    """The SYNC before a step meets the outage: it waits out the back-off and runs again;
    the step is not launched into the outage in the same second (a second failed call)."""
    t = loop_tree
    t.node("s", {"01-A.md": "[stub:write=a.txt:a]"}, "--max-iters", "1",
           node_md="# Task\n\n[stub:outage-first=1]\n")
    assert t.run("s") == 0
    calls = [(c.is_sync, round(c.started_at)) for c in t.launcher.calls]
    assert [sync for sync, _ in calls[:2]] == [True, True]  # the SYNC again, not the step
    assert calls[1][1] - calls[0][1] == 30  # after the first back-off
    assert t.run_row("s")[:2] == ("completed", 0)
