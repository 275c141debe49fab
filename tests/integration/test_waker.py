"""The supervisor's wake file watch (fractal/runtime/waker.py) on a real directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fractal.control import WAKE_FILE, touch_wake
from fractal.runtime.waker import Waker

WAIT = 10.0  # seconds a wake may take to arrive on a loaded machine


@pytest.fixture
def waker(tmp_path: Path):  # type: ignore[no-untyped-def]
    waker = Waker()
    assert waker.watch(tmp_path)
    yield waker
    waker.close()


def _written_and_closed(path: Path) -> None:
    path.write_text("x\n")


def _moved_into_place(path: Path) -> None:
    staged = path.with_name("staged")
    staged.write_text("x\n")
    os.replace(staged, path)


@pytest.mark.parametrize("first", [True, False], ids=["creates", "rewrites"])
def test_a_touch_of_the_wake_file_wakes_the_wait(tmp_path: Path, waker: Waker,
                                                 first: bool) -> None:
    if not first:
        (tmp_path / WAKE_FILE).write_text("old\n")
        waker.wait(0.0)  # drop the wake that write may have raised
    touch_wake(tmp_path)
    assert waker.wait(WAIT, poll=WAIT)


@pytest.mark.parametrize("write", [_written_and_closed, _moved_into_place],
                         ids=["written", "moved"])
def test_the_wake_file_written_or_moved_into_place_wakes(tmp_path: Path, waker: Waker,
                                                          write) -> None:  # type: ignore[no-untyped-def]
    write(tmp_path / WAKE_FILE)
    assert waker.wait(WAIT, poll=WAIT)


def test_appends_to_a_log_beside_it_do_not_wake_but_the_touch_after_them_does(
        tmp_path: Path) -> None:
    # The wake file exists before the watch, as in a running node: a touch is then one
    # close event (creating it would also be a create event, a second wake arriving late).
    (tmp_path / WAKE_FILE).write_text("old\n")
    waker = Waker()
    assert waker.watch(tmp_path)
    try:
        with (tmp_path / "supervisor.log").open("a") as log:
            for n in range(50):
                log.write(f"line {n}\n")
                log.flush()
            touch_wake(tmp_path)
            assert waker.wait(WAIT, poll=WAIT)
            log.write("one more\n")
            log.flush()
            assert not waker.wait(0.3, poll=0.3)
    finally:
        waker.close()


def test_a_rewrite_wakes_under_an_observer_without_close_events(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only Linux's inotify reports a file closed after writing; macOS (FSEvents), the BSDs
    (kqueue) and the polling observer report the rewrite of an existing wake file as a
    modification. There it must still wake, else every verb after the first waits out an
    idle poll (5 s)."""
    import watchdog.observers
    from watchdog.observers.polling import PollingObserver

    monkeypatch.setattr(watchdog.observers, "Observer", PollingObserver)
    (tmp_path / WAKE_FILE).write_text("old\n")
    waker = Waker()
    assert waker.watch(tmp_path)
    try:
        waker.wait(0.0)
        touch_wake(tmp_path)
        assert waker.wait(WAIT, poll=WAIT)
    finally:
        waker.close()
