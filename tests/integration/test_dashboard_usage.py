"""A usage-window wait on the dashboard against ``fractal inbox`` on one real tree: the
same instant while the window is closed, the same follower words while another node
probes it, the same follower words once that probe reopened it, in the inbox pane and on
the tree line."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fractal.store.engine import close_engines
from fractal.store.ledger import Ledger
from fractal.store.windows import Windows
from fractal.tree import find_tree
from fractal.tui.snapshot import Builder, Snapshot
from tests.helpers import force_status, make_repo
from tests.trees import run_cli


def _fractal(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(list(args), repo, check=False)


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Path]:
    repo = make_repo(tmp_path / "repo")
    for args in (["init"], ["node", "init", "waiter"]):
        done = _fractal(repo, *args)
        assert done.returncode == 0, done.stderr
    yield repo
    close_engines()


def _cli_summary(repo: Path) -> str:
    out = _fractal(repo, "inbox", "--json")
    assert out.returncode == 0, out.stderr
    usage = [i for i in json.loads(out.stdout) if i["kind"] == "usage"]
    assert len(usage) == 1, usage
    return str(usage[0]["summary"])


def _dash(snap: Snapshot, now: float) -> tuple[str, str]:
    """(the inbox pane's usage summary, the waiter's tree line)."""
    usage = [e.item for e in snap.inbox if e.item.kind.value == "usage"]
    assert len(usage) == 1, usage
    view = snap.node("main.waiter")
    assert view is not None
    return usage[0].summary, view.detail(now)


def test_the_dashboard_shows_the_usage_wait_as_the_cli_inbox_does(repo: Path) -> None:
    from fractal.domain.attention.rules import FOLLOWER_UNTIL

    tree = find_tree(repo)
    db = tree.db_path
    ledger = Ledger(db)
    run = ledger.open_run("main.waiter", agent="stub", max_cost=None, parent_run_id=None)
    now = time.time()
    row = Windows(db).close("cred", "five_hour", now + 3600, "main.waiter", now)
    notice = time.strftime("waiting for usage window until %H:%M:%SZ",
                           time.gmtime(row.wake_at))
    ledger.add_event("main.waiter", "usage_wait", actor="loop", status="started",
                     metadata=notice, run_id=run)
    force_status(db, "main.waiter", "active")
    kept = Builder(tree)

    # The window is closed: one instant, to the second, in every view.
    summary, line = _dash(kept.build(now=now), now)
    iso = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(row.wake_at))
    assert summary == _cli_summary(repo)
    assert f"until {iso}" in summary
    assert line == f"run {run} · {notice}"

    # Another node probing it: still the same instant everywhere.
    assert Windows(db).claim_probe("cred", "main.other", row.wake_at + 1)
    summary, line = _dash(kept.build(now=row.wake_at + 1), row.wake_at + 1)
    assert summary == _cli_summary(repo)
    assert f"until {iso}" in summary and line == f"run {run} · {notice}"

    # That probe got through: no window is closed, and the waiter, not launched yet,
    # follows it. The kept builder, re-reading only what changed, says so too.
    assert Windows(db).reopen("cred", "main.other", row.wake_at + 2)
    later = row.wake_at + 3
    summary, line = _dash(kept.build(now=later), later)
    assert summary == _cli_summary(repo)
    assert FOLLOWER_UNTIL in summary
    assert line == f"run {run} · waiting for usage window {FOLLOWER_UNTIL}"
    assert "unknown" not in line
