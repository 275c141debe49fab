"""Process groups against real processes: spawn, kill, sweep, reap, tee (procs/processes.py)."""

from __future__ import annotations

import errno
import os
import signal
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from fractal.errors import SpawnError
from fractal.procs import commands, processes
from fractal.procs.processes import GroupHandle, Launched
from tests.helpers import SCALE, pid_alive, wait_until

STUBS = Path(__file__).resolve().parents[1] / "stubs"
ROOT = Path(__file__).resolve().parents[2]


def _read_line(launched: Launched) -> bytes:
    assert launched.popen.stdout is not None
    return launched.popen.stdout.readline().strip()


def _spawn(spawned: list[Launched], argv: list[str], *, stdin_data: bytes | None = None,
           stderr_path: Path | None = None, marker: str | None = None) -> Launched:
    launched = processes.spawn_group(argv, cwd=STUBS, env=os.environ, stdin_data=stdin_data,
                                     stderr_path=stderr_path, marker=marker)
    spawned.append(launched)
    return launched


def test_spawn_starts_a_new_session_with_the_marker(spawned: list[Launched]) -> None:
    launched = _spawn(spawned, ["sleep", "300"], marker="m-" + uuid.uuid4().hex)
    handle = launched.handle
    assert handle.pid == handle.pgid == os.getpgid(handle.pid) == os.getsid(handle.pid)
    assert processes.same_process(handle.pid, handle.create_time)
    assert processes.process_create_time(handle.pid) == pytest.approx(handle.create_time)
    assert [p.pid for p in processes.marked_processes(handle.marker)] == [handle.pid]
    assert handle.pid in [p.pid for p in processes.marked_processes()]


def test_term_ignoring_child_is_killed_within_grace(spawned: list[Launched]) -> None:
    launched = _spawn(spawned, [str(STUBS / "proc_ignore_term.sh")])
    assert _read_line(launched) == b"ready"
    leader = psutil.Process(launched.handle.pid)
    members = [leader.pid, *(c.pid for c in leader.children())]
    started = time.monotonic()
    survivors = processes.kill_group(launched.handle, grace=0.5)
    assert survivors == []
    assert time.monotonic() - started < 0.5 + 1.0 * SCALE
    assert not [pid for pid in members if pid_alive(pid)]
    assert processes.marked_processes(launched.handle.marker) == []
    assert launched.popen.wait(timeout=5) == -signal.SIGKILL


def test_setsid_grandchild_is_killed_with_its_group(spawned: list[Launched]) -> None:
    launched = _spawn(spawned, [str(STUBS / "proc_setsid_child.sh")])
    grandchild = int(_read_line(launched))
    wait_until(lambda: os.getsid(grandchild) == grandchild, 5, message="setsid took effect")
    assert processes.kill_group(launched.handle, grace=2.0) == []
    assert not pid_alive(grandchild)
    assert processes.marked_processes(launched.handle.marker) == []


def test_sweep_marker_reaps_an_escaped_grandchild(spawned: list[Launched]) -> None:
    launched = _spawn(spawned, [str(STUBS / "proc_setsid_child.sh"), "exit"])
    grandchild = int(_read_line(launched))
    assert launched.popen.wait(timeout=10) == 0
    assert pid_alive(grandchild)
    assert processes.sweep_marker(launched.handle.marker, grace=2.0) == []
    assert not pid_alive(grandchild)


def test_sweep_marker_is_cheap_when_nothing_matches() -> None:
    started = time.monotonic()
    assert processes.sweep_marker(uuid.uuid4().hex, grace=5.0) == []
    assert time.monotonic() - started < 0.5 * SCALE


@pytest.mark.parametrize("same_marker", [False, True])
def test_recycled_pid_is_never_signalled_by_pid(spawned: list[Launched], same_marker: bool) -> None:
    launched = _spawn(spawned, ["sleep", "300"])
    real = launched.handle
    stale = GroupHandle(pid=real.pid, pgid=real.pgid, create_time=real.create_time - 1000.0,
                        marker=real.marker if same_marker else uuid.uuid4().hex)
    assert processes.kill_group(stale, grace=0.5) == []
    # Only the marker may reach a process whose pid no longer matches the handle.
    assert processes.same_process(real.pid, real.create_time) is not same_marker


@pytest.mark.parametrize(("kind", "expected"), [
    ("missing", errno.ENOENT),
    ("not-executable", errno.EACCES),
    ("no-shebang", errno.ENOEXEC),
])
def test_spawn_error_names_the_binary(tmp_path: Path, kind: str, expected: int) -> None:
    binary = tmp_path / "agent-bin"
    if kind != "missing":
        binary.write_bytes(b"\x00\x01 not a script\n")
        binary.chmod(0o755 if kind == "no-shebang" else 0o644)
    with pytest.raises(SpawnError) as info:
        processes.spawn_group([str(binary)], cwd=tmp_path, env=os.environ)
    assert info.value.errno == expected
    assert str(binary) in str(info.value)


def test_missing_working_directory_is_a_spawn_error(tmp_path: Path) -> None:
    with pytest.raises(SpawnError, match="working directory"):
        processes.spawn_group(["true"], cwd=tmp_path / "gone", env=os.environ)


def test_huge_stdin_to_a_reader_is_delivered(spawned: list[Launched]) -> None:
    data = b"x" * (10 * 1024 * 1024)
    launched = _spawn(spawned, ["wc", "-c"], stdin_data=data)
    assert int(_read_line(launched)) == len(data)
    assert launched.popen.wait(timeout=10) == 0


def test_huge_stdin_to_a_non_reader_does_not_hang(spawned: list[Launched]) -> None:
    started = time.monotonic()
    launched = _spawn(spawned, ["sleep", "0.3"], stdin_data=b"y" * (10 * 1024 * 1024))
    assert time.monotonic() - started < 1.0 * SCALE
    assert launched.popen.wait(timeout=10) == 0


def test_stderr_goes_to_its_file(spawned: list[Launched], tmp_path: Path) -> None:
    err = tmp_path / "stderr.log"
    err.write_text("old content that must be truncated\n")
    launched = _spawn(spawned, [str(STUBS / "proc_teed.sh")], stderr_path=err)
    assert _read_line(launched) == b"out \xff\xfe line"
    assert launched.popen.wait(timeout=10) == 3
    assert err.read_bytes() == b"err \xc0 line\n"


def test_soft_signal_lets_the_agent_exit_before_term(spawned: list[Launched]) -> None:
    launched = _spawn(spawned, [str(STUBS / "proc_trap_int.sh")])
    assert _read_line(launched) == b"ready"
    # The trap exits at the INT; its background sleep ignores INT and holds the group for
    # the whole soft grace, so a short one keeps the test short.
    survivors = processes.kill_group(launched.handle, grace=2.0, soft_signal=signal.SIGINT,
                                     soft_grace=2.0)
    assert survivors == []
    assert launched.popen.wait(timeout=5) == 7
    assert launched.popen.stdout is not None
    assert launched.popen.stdout.read() == b"got INT\n"
    assert processes.marked_processes(launched.handle.marker) == []


def test_run_teed_captures_bytes_and_exit_code(tmp_path: Path) -> None:
    log = tmp_path / "setup.log"
    log.write_text("previous run\n")
    echoed: list[bytes] = []
    code = commands.run_teed([str(STUBS / "proc_teed.sh")], cwd=tmp_path, env=os.environ,
                              log_path=log, echo=echoed.append)
    assert code == 3
    body = log.read_bytes()
    assert b"out \xff\xfe line\n" in body and b"err \xc0 line\n" in body
    assert b"previous run" not in body
    assert b"".join(echoed) == body


def test_run_teed_reports_a_signal_death_as_128_plus_n(tmp_path: Path) -> None:
    code = commands.run_teed(["sh", "-c", "kill -TERM $$"], cwd=tmp_path, env=os.environ,
                              log_path=tmp_path / "setup.log")
    assert code == 128 + signal.SIGTERM


def test_run_teed_sweeps_an_escaped_background_child(tmp_path: Path) -> None:
    log = tmp_path / "setup.log"
    started = time.monotonic()
    code = commands.run_teed(["sh", "-c", "sleep 300 & echo $!"], cwd=tmp_path,
                              env=os.environ, log_path=log, grace=1.0)
    assert code == 0
    assert time.monotonic() - started < 5.0 * SCALE
    assert not pid_alive(int(log.read_text().strip()))


def test_run_teed_raises_spawn_error(tmp_path: Path) -> None:
    with pytest.raises(SpawnError) as info:
        commands.run_teed([str(tmp_path / "setup.sh")], cwd=tmp_path, env=os.environ,
                           log_path=tmp_path / "setup.log")
    assert info.value.errno == errno.ENOENT


def test_subreaper_adopts_and_reaps_orphans(tmp_path: Path) -> None:
    # In a child interpreter: making pytest itself a subreaper would change other tests.
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    log = tmp_path / "subreaper.log"
    code = commands.run_teed([sys.executable, str(STUBS / "proc_subreaper.py")], cwd=ROOT,
                              env=env, log_path=log)
    assert code == 0, log.read_text()


def test_reap_orphans_keeps_listed_children(spawned: list[Launched]) -> None:
    launched = _spawn(spawned, ["true"])
    wait_until(lambda: not pid_alive(launched.handle.pid), 5, message="child exited")
    assert launched.handle.pid not in processes.reap_orphans(keep={launched.handle.pid})
    assert launched.popen.wait(timeout=5) == 0


def test_gone_process_has_no_create_time(spawned: list[Launched]) -> None:
    launched = _spawn(spawned, ["true"])
    launched.popen.wait(timeout=5)
    assert processes.process_create_time(launched.handle.pid) is None
    assert not processes.same_process(launched.handle.pid, launched.handle.create_time)


def test_kill_group_never_signals_the_caller_or_its_group() -> None:
    me = psutil.Process()
    own = GroupHandle(pid=me.pid, pgid=os.getpgid(0), create_time=me.create_time(),
                      marker=uuid.uuid4().hex)
    assert processes.kill_group(own, grace=0.2, soft_signal=signal.SIGINT, soft_grace=0.2) == []
    assert processes.same_process(me.pid, me.create_time())


def test_a_handle_without_a_marker_never_reaches_other_launches(
        spawned: list[Launched]) -> None:
    """Regression: an empty marker once matched every marked process on the machine, so
    killing one node's supervisor (a handle with marker "") killed every agent."""
    bystander = _spawn(spawned, ["sleep", "60"])
    target = _spawn(spawned, ["sleep", "60"])
    handle = processes.GroupHandle(pid=target.handle.pid, pgid=target.handle.pgid,
                                   create_time=target.handle.create_time, marker="")
    assert processes.kill_group(handle, grace=2.0) == []
    assert target.popen.wait(timeout=5) != 0
    assert bystander.popen.poll() is None


def test_a_log_swapped_for_a_symlink_is_never_written_through(spawned: list[Launched],
                                                              tmp_path: Path) -> None:
    """The supervisor's err files and setup log refuse a symlink (an agent's swap in its
    node dir): the spawn and the teed run fail, and the link's target keeps its bytes."""
    target = tmp_path / "config"
    target.write_text("[core]\n")
    err, log = tmp_path / "command.err", tmp_path / "setup.log"
    err.symlink_to(target)
    log.symlink_to(target)
    with pytest.raises(OSError) as raised:
        _spawn(spawned, ["true"], stderr_path=err)
    assert raised.value.errno == errno.ELOOP
    with pytest.raises(OSError) as raised:
        commands.run_teed(["true"], cwd=tmp_path, env=os.environ, log_path=log)
    assert raised.value.errno == errno.ELOOP
    assert target.read_text() == "[core]\n"
