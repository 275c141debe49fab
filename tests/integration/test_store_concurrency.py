"""Concurrent writers queue on the lock instead of failing; fenced closes race cleanly."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from fractal.store.ledger import Ledger
from tests import ledgersql
from tests.helpers import wait_until

pytestmark = pytest.mark.backend  # the store tier runs on every backend --backend chooses

REPO = Path(__file__).resolve().parents[2]
NODE = "main.busy"


def _count(db: Path, table: str) -> int:
    with ledgersql.connect(db) as conn:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


def test_threads_writing_at_once_all_succeed(tmp_path: Path) -> None:
    db = tmp_path / "fractal.db"
    ledger = Ledger(db)
    run = ledger.open_run(NODE, agent=None, max_cost=None, parent_run_id=None)
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def work(worker: int) -> None:
        try:
            own = Ledger(db)  # same cached engine, its own pooled connection
            start.wait()
            for n in range(40):
                step = own.open_step(node=NODE, run_id=run, iter_id=None, step=n,
                                     step_name=f"W{worker}", agent=None, model=None,
                                     session=None)
                own.set_step_cost(step, 0.01)
                own.close_step(step, "completed", 0, "")
                own.add_signal(NODE, run, "pause")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    assert _count(db, "steps") == 8 * 40
    assert _count(db, "signals") == 8 * 40
    assert ledger.open_steps(NODE) == []


_WRITER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from fractal.store.ledger import Ledger
    from tests.helpers import wait_until
    db, ready, go, run, worker = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), \\
        int(sys.argv[4]), sys.argv[5]
    ledger = Ledger(db)
    ready.touch()
    wait_until(go.exists, timeout=30, interval=0.002, message="writer never released")
    if worker == "closer":
        print("won" if ledger.close_run(run, "stopped", 0, f"by {ready.name}") else "lost")
    else:
        for n in range(60):
            step = ledger.open_step(node="main.busy", run_id=run, iter_id=None, step=n,
                                    step_name=worker, agent=None, model=None, session=None)
            ledger.close_step(step, "completed", 0, "", cost=0.5)
            ledger.add_event("main.busy", "commit", run_id=run, step_id=step)
""")


def _launch(tmp_path: Path, db: Path, run: int, roles: list[str]) -> list[str]:
    """Start one process per role, release them together, return their stdouts."""
    go = tmp_path / "go"
    procs = []
    for i, role in enumerate(roles):
        ready = tmp_path / f"ready-{i}"
        procs.append((ready, subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(db), str(ready), str(go), str(run), role],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
    wait_until(lambda: all(ready.exists() for ready, _ in procs), timeout=60,
               message="writers did not start")
    go.touch()
    outputs = []
    for _, proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert "locked" not in err
        outputs.append(out.strip())
    return outputs


def test_processes_writing_at_once_all_succeed(tmp_path: Path) -> None:
    db = tmp_path / "fractal.db"
    run = Ledger(db).open_run(NODE, agent=None, max_cost=None, parent_run_id=None)
    _launch(tmp_path, db, run, ["a", "b", "c", "d"])
    assert _count(db, "steps") == 4 * 60
    assert _count(db, "events") == 4 * 60
    with ledgersql.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM steps WHERE ended_at IS NULL").fetchone() == (0,)


def test_processes_racing_to_close_one_run_have_exactly_one_winner(tmp_path: Path) -> None:
    db = tmp_path / "fractal.db"
    ledger = Ledger(db)
    run = ledger.open_run(NODE, agent=None, max_cost=None, parent_run_id=None)
    verdicts = _launch(tmp_path, db, run, ["closer"] * 4)
    assert sorted(verdicts) == ["lost", "lost", "lost", "won"]
    row = ledger.run(run)
    assert row is not None
    winner = verdicts.index("won")
    assert (row.status, row.meta) == ("stopped", f"by ready-{winner}")
