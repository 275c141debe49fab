"""Run helper commands to completion with merged output: setup.sh (teed to a log and
the pane, unbounded) and short helpers (captured). Every process goes through
``processes.spawn_group`` and is reaped with ``processes.kill_group``."""

from __future__ import annotations

import os
import select
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from fractal.domain.run.reasons import EXIT_TIMEOUT
from fractal.procs.processes import DEFAULT_GRACE, GroupHandle, kill_group, open_log, spawn_group

_POLL = 0.05  # seconds between pipe polls
_DRAIN = 1.0  # seconds a pipe is drained after its leader exited


def _pump(fd: int, sink: Callable[[bytes], None], poll: Callable[[], int | None]) -> None:
    """Copy ``fd`` to ``sink`` until EOF, or until the leader exited and the pipe went idle;
    an escapee may hold the pipe open (or keep writing) forever, so drain <= ``_DRAIN`` s."""
    drain_until: float | None = None
    while drain_until is None or time.monotonic() < drain_until:
        if select.select([fd], [], [], _POLL)[0]:
            chunk = os.read(fd, 65536)
            if not chunk:
                return
            sink(chunk)
        elif drain_until is not None:
            return
        if drain_until is None and poll() is not None:
            drain_until = time.monotonic() + _DRAIN


def _run_merged(argv: Sequence[str], *, cwd: Path, env: Mapping[str, str],
                sink: Callable[[bytes], None], grace: float, timeout: float | None = None) -> int:
    """The body of run_teed and run_capture: output goes to ``sink``; stopped by a timer
    after ``timeout`` s (None: never), which makes the exit code EXIT_TIMEOUT."""
    launched = spawn_group(argv, cwd=cwd, env=env, merge_stderr=True)
    popen, handle = launched.popen, launched.handle
    assert popen.stdout is not None
    expired, timer = _stopper(handle, timeout or 0.0, grace)
    try:
        if timeout is not None:
            timer.start()
        _pump(popen.stdout.fileno(), sink, popen.poll)
        returncode = popen.wait()
        timer.cancel()
        if timeout is not None:
            timer.join()  # a stop already under way finishes first
        kill_group(handle, grace=grace)
        _pump(popen.stdout.fileno(), sink, popen.poll)  # what the swept escapees left behind
    except BaseException:
        timer.cancel()
        kill_group(handle, grace=grace)
        popen.wait()
        raise
    finally:
        popen.stdout.close()
    return _exit_code(returncode, expired)


def _stopper(handle: GroupHandle, timeout: float, grace: float
             ) -> tuple[threading.Event, threading.Timer]:
    """A daemon timer (not started) that stops ``handle``'s group after ``timeout`` s
    (TERM, ``grace`` s, KILL), and the event it sets when it fired."""
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        kill_group(handle, grace=grace)

    timer = threading.Timer(timeout, expire)
    timer.daemon = True
    return expired, timer


def _exit_code(returncode: int, expired: threading.Event) -> int:
    """EXIT_TIMEOUT when the stopper fired; else the code, 128+N for death by signal N."""
    code = 128 - returncode if returncode < 0 else returncode
    return EXIT_TIMEOUT if expired.is_set() else code


def run_teed(argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], log_path: Path,
             echo: Callable[[bytes], None] | None = None, grace: float = DEFAULT_GRACE,
             timeout: float | None = None) -> int:
    """Run ``argv`` to completion (no limit by default: setup.sh is unbounded); return its
    exit code. With ``timeout`` (seconds; check commands have one) the group is stopped then
    and the code is EXIT_TIMEOUT (124).

    New session, stdin /dev/null, stdout+stderr merged; each chunk (raw bytes) goes to
    ``log_path`` (truncated first; never through a symlink: ``processes.open_log``) and to
    ``echo``. 128+N means death by signal N. Then the
    group and its marker are stopped (``grace`` s from TERM to KILL), also when the caller is
    interrupted (Ctrl-C) before the exception propagates. Raises SpawnError when exec fails.
    """
    with open_log(log_path) as log:
        def sink(chunk: bytes) -> None:
            log.write(chunk)
            log.flush()
            if echo is not None:
                echo(chunk)

        return _run_merged(argv, cwd=cwd, env=env, sink=sink, grace=grace, timeout=timeout)


def run_capture(argv: Sequence[str], *, cwd: Path, env: Mapping[str, str] | None = None,
                timeout: float | None = None, grace: float = DEFAULT_GRACE) -> tuple[int, str]:
    """Run a helper command to completion (e.g. the demo's tests); return (exit code, output).

    As run_teed, but stdout+stderr come back as text (UTF-8, bad bytes replaced) and ``env``
    None means this process's environment. After ``timeout`` seconds (None: no limit) the
    group is stopped (TERM, ``grace`` s, KILL) and the code is EXIT_TIMEOUT (124).
    """
    chunks: list[bytes] = []
    code = _run_merged(argv, cwd=cwd, env=os.environ if env is None else env,
                       sink=chunks.append, grace=grace, timeout=timeout)
    return code, b"".join(chunks).decode("utf-8", errors="replace")


def run_split(argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], stdin: bytes,
              timeout: float, grace: float = DEFAULT_GRACE) -> tuple[int, bytes, bytes]:
    """Run ``argv`` to completion in a new session with ``stdin`` as its input; return
    (exit code, stdout, stderr). After ``timeout`` seconds the group is stopped (TERM,
    ``grace`` s, KILL) and the code is EXIT_TIMEOUT (124); 128+N means death by signal N.
    Its stderr goes through a private temporary file. Raises SpawnError when exec fails."""
    import tempfile  # deferred: only a relay answer needs it (13 modules)

    with tempfile.TemporaryDirectory(prefix="fractal-relay-") as tmp:
        err_path = Path(tmp) / "stderr"
        launched = spawn_group(argv, cwd=cwd, env=env, stdin_data=stdin,
                               stderr_path=err_path)
        popen, handle = launched.popen, launched.handle
        assert popen.stdout is not None
        expired, timer = _stopper(handle, timeout, grace)
        timer.start()
        chunks: list[bytes] = []
        try:
            _pump(popen.stdout.fileno(), chunks.append, popen.poll)
            returncode = popen.wait()
        finally:
            timer.cancel()
            kill_group(handle, grace=grace)
            popen.stdout.close()
        err = err_path.read_bytes()
    return _exit_code(returncode, expired), b"".join(chunks), err
