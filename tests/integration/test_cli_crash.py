"""The crash log of an internal error: where it goes, what it holds, what is kept, and
what happens when it cannot be written anywhere."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fractal.cli.crash import CRASH_EXIT, report_crash
from fractal.crashlog import KEEP, CrashSite, crash_dirs, state_dir


def _raise() -> RuntimeError:
    try:
        raise RuntimeError("boom")
    except RuntimeError as exc:
        return exc


@pytest.mark.parametrize(("xdg", "expected"), [
    ("/abs/state", Path("/abs/state/fractal")),
    ("relative/state", None),  # not absolute: ignored, as the XDG rules say
    ("", None),
], ids=["absolute", "relative", "unset"])
def test_state_dir_follows_xdg(xdg: str, expected: Path | None) -> None:
    env = {"XDG_STATE_HOME": xdg} if xdg else {}
    assert state_dir(env) == (expected or Path.home() / ".local" / "state" / "fractal")


def test_the_tree_comes_first_then_the_state_dir(tmp_path: Path) -> None:
    assert crash_dirs(CrashSite()) == [state_dir()]
    assert crash_dirs(CrashSite(data_dir=tmp_path)) == [tmp_path / "logs", state_dir()]


def test_an_unwritable_tree_falls_back_to_the_state_dir(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    blocked = tmp_path / "tree"
    blocked.write_text("a file where the data dir should be")
    assert report_crash(_raise(), CrashSite(data_dir=blocked, argv=["x"])) == CRASH_EXIT
    line = capsys.readouterr().err
    assert line.count("\n") == 1 and str(tmp_path / "state" / "fractal") in line


def test_no_writable_place_puts_the_traceback_on_stderr(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    blocked = tmp_path / "blocked"
    blocked.write_text("")
    monkeypatch.setenv("XDG_STATE_HOME", str(blocked))
    assert report_crash(_raise(), CrashSite(data_dir=blocked)) == CRASH_EXIT
    err = capsys.readouterr().err
    assert err.startswith("Internal error (RuntimeError: boom); no crash log could be written")
    assert "Traceback (most recent call last)" in err


def test_only_the_newest_logs_are_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    for n in range(KEEP + 5):
        old = logs / f"crash-old-{n:02d}.log"
        old.write_text("")
        os.utime(old, (1000 + n, 1000 + n))
    report_crash(_raise(), CrashSite(data_dir=tmp_path))
    kept = sorted(p.name for p in logs.glob("crash-*.log"))
    assert len(kept) == KEEP
    assert "crash-old-00.log" not in kept and "crash-old-24.log" in kept
    assert any(not name.startswith("crash-old") for name in kept)  # the new one
    capsys.readouterr()


def test_two_crashes_of_one_process_in_one_second_keep_both_logs(tmp_path: Path) -> None:
    """A long-lived process (the dashboard) can fault twice within a second: the second
    log takes the next free name in the tree, never another place nor none."""
    import time

    from fractal.crashlog import save_crash

    logs = tmp_path / "logs"
    logs.mkdir()
    now = time.time()
    taken = [logs / f"crash-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(now + d))}-"
                    f"{os.getpid()}.log" for d in (0, 1)]  # this second's name, the next's
    for path in taken:
        path.write_text("an earlier crash\n")
    saved = save_crash(_raise(), CrashSite(data_dir=tmp_path))
    assert saved is not None and saved.parent == logs and saved not in taken
    assert saved.name.endswith("-2.log") and "RuntimeError: boom" in saved.read_text()
    assert all(p.read_text() == "an earlier crash\n" for p in taken)
