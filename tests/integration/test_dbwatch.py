"""The dashboard's watchdog wake on the database files (fractal/tui/watch.py)."""

from __future__ import annotations

from pathlib import Path

from fractal.tui.watch import DbWatch
from tests.helpers import wait_until


def test_a_write_to_the_db_files_wakes_once(tmp_path: Path) -> None:
    db = tmp_path / "fractal.db"
    db.write_bytes(b"")
    watch = DbWatch()
    assert watch.start(db)
    try:
        (tmp_path / "other.txt").write_text("not ours")
        (tmp_path / "fractal.db-wal").write_bytes(b"x")
        assert wait_until(watch.pending, timeout=10, message="a wake")
        assert not watch.pending()  # once per change
    finally:
        watch.close()
