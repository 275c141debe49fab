"""A fork server for the tests' ``fractal`` CLI calls: real processes without the start-up.

Every ``fractal`` call of the end-to-end and soak tiers used to start a fresh interpreter
that imported click, SQLAlchemy and the verbs again: a few hundred milliseconds of CPU
each, thousands of times a run. The server is started once per test process (each xdist
worker has its own), imports the CLI's modules once, and forks a child per call. The
child is a real process like ``python -m fractal ARGS``: its own pid, working directory,
whole environment, stdin (``/dev/null``), stdout and stderr pipes, and exit status
(``sys.exit`` codes, 1 with a traceback for an uncaught exception, death by SIGINT for an
uncaught ``KeyboardInterrupt``); its non-daemon threads are joined and its ``atexit``
handlers run before it exits. Only the interpreter's start-up and imports are shared,
so a test that checks what a command imports must start its own interpreter (as
``tests/stylecheck.py`` does).

Protocol, over a ``SOCK_SEQPACKET`` Unix socket: the client sends one JSON message
``{"argv": [...], "cwd": ..., "env": {...}}`` with three descriptors (stdin, stdout,
stderr); the server answers ``pid N`` once the child is forked and ``exit CODE CPU`` when
it has been reaped (CODE as ``Popen.returncode``: negative for a signal; CPU its seconds). The server exits
when its stdin (a pipe from the test process) closes.

``run`` is the client (``tests.trees.run_cli`` calls it): it starts the server on first
use (its pid is exempt from the leak guard; its children are not), stops it when the test
process exits, and falls back to a plain subprocess when the server cannot be reached.
``FRACTAL_TEST_CLI_SERVER=0`` turns it off (every call starts an interpreter again);
``FRACTAL_TEST_CLI_LOG=<file>`` logs each call's argv and CPU seconds (``CALL_LOG``).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import json
import locale
import os
import pkgutil
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Mapping
from pathlib import Path

from tests.guards import CLI_SPAWNS, EXEMPT_PIDS

PRELOAD = ("fractal.cli", "fractal.cli.*", "fractal.lifecycle.*", "fractal.store.*",
           "fractal.workspace.*", "fractal.control", "fractal.tmux", "fractal.tree",
           "sqlalchemy.orm", "alembic.command", "alembic.runtime.migration", "tabulate")
"""Modules imported before the first fork (a name ending in ``.*``: each module of the
package). The dashboard (Textual) is left out: the tests drive it in-process."""

ROOT = Path(__file__).resolve().parents[1]
MAIN = str(ROOT / "fractal" / "__main__.py")
CALL_LOG = os.environ.get("FRACTAL_TEST_CLI_LOG")
"""A file that gets one JSON line per call the server ran (argv, CPU seconds, the test),
when set; ``python -m tests.timing --cli FILE`` sums it per command."""
ENABLED = os.environ.get("FRACTAL_TEST_CLI_SERVER", "1") != "0"  # read before the session
# strips FRACTAL_* from the environment


def _preload() -> None:
    for name in PRELOAD:
        package, _, star = name.partition(".*")
        names = [package]
        if star == "" and name.endswith(".*"):
            with contextlib.suppress(ImportError):
                mod = importlib.import_module(package)
                names += [f"{package}.{m.name}" for m in pkgutil.iter_modules(mod.__path__)]
        for each in names:
            with contextlib.suppress(Exception):  # a module another branch moved or removed
                importlib.import_module(each)


def _exit_code(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _finish() -> None:
    """What the interpreter does at exit: join non-daemon threads, run atexit, flush."""
    me = threading.current_thread()
    for thread in threading.enumerate():
        if thread is not me and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    gc.collect()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def _child(request: dict[str, object], fds: list[int]) -> None:
    """In the forked child: become ``python -m fractal ARGV``; never returns."""
    code = 1
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(str(request["cwd"]))
        env = request["env"]
        assert isinstance(env, dict)
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in env.items()})
        argv = request["argv"]
        assert isinstance(argv, list)
        sys.argv = [MAIN, *map(str, argv)]
        sys.path[0] = os.getcwd()
        from fractal.cli import main
        try:
            main([str(a) for a in argv])
            code = 0
        except SystemExit as exc:
            code = _exit_code(exc)
        except KeyboardInterrupt:
            _finish()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        except BaseException:
            traceback.print_exc()
            code = 1
        _finish()
    except BaseException:  # the set-up itself failed: say so on the child's stderr
        with contextlib.suppress(Exception):
            traceback.print_exc()
    finally:
        os._exit(code)


def serve(path: str) -> None:
    _preload()
    gc.collect()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: dict[int, socket.socket] = {}
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(wake_r, selectors.EVENT_READ, "reap")
    selector.register(sys.stdin.fileno(), selectors.EVENT_READ, "parent")
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        for key, _ in selector.select():
            if key.data == "parent":
                if not os.read(sys.stdin.fileno(), 512):
                    return  # the test process is gone or done
            elif key.data == "accept":
                conn, _ = listener.accept()
                try:
                    message, fds, _flags, _addr = socket.recv_fds(conn, 1 << 20, 3)
                    request = json.loads(message)
                except (OSError, ValueError):
                    conn.close()
                    continue
                sys.stdout.flush()
                sys.stderr.flush()
                # Everything the server holds moves to the collector's permanent
                # generation: a child's collections (its own and ``_finish``'s) then
                # scan only the objects it made, instead of walking, and so copying,
                # every page of the preloaded modules (about 0.1 s of CPU a call).
                gc.freeze()
                pid = os.fork()
                if pid == 0:
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    selector.close()
                    for fd in (wake_r, wake_w, listener.fileno(), conn.fileno()):
                        os.close(fd)
                    _child(request, fds)
                for fd in fds:
                    os.close(fd)
                children[pid] = conn
                with contextlib.suppress(OSError):
                    conn.send(f"pid {pid}".encode())
            else:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 4096)
            _reap(children)


def _reap(children: dict[int, socket.socket]) -> None:
    while children:
        try:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            cpu = usage.ru_utime + usage.ru_stime  # the child's and its waited-for children's
            with contextlib.suppress(OSError):
                conn.send(f"exit {os.waitstatus_to_exitcode(status)} {cpu:.4f}".encode())
            conn.close()


# -- the client ------------------------------------------------------------------------------

class _Server:
    """The running server of this test process."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="fxs-")  # short: sun_path holds 108 bytes
        self.socket = os.path.join(self.dir, "s")
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.cliserver", self.socket],
                                     cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env=dict(os.environ))
        EXEMPT_PIDS.add(self.proc.pid)
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != b"ready":
            raise OSError("the CLI fork server did not start")
        atexit.register(self.stop)

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        shutil.rmtree(self.dir, ignore_errors=True)


CLI_CPU = [0.0]
"""CPU seconds of the calls the server ran for this process (they are not our children, so
``RUSAGE_CHILDREN`` misses them; ``tests/timing.py`` adds these)."""

_SERVER: list[_Server] = []
_START = threading.Lock()


def _server() -> _Server | None:
    with _START:
        if _SERVER and _SERVER[0].proc.poll() is None:
            return _SERVER[0]
        _SERVER.clear()
        try:
            _SERVER.append(_Server())
        except OSError:
            return None
        return _SERVER[0]


def _text(data: bytes) -> str:
    """As ``subprocess.run(text=True)`` decodes: the locale's encoding, universal newlines."""
    text = data.decode(locale.getpreferredencoding(False))
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _feed(fd: int, data: bytes) -> None:
    with contextlib.suppress(OSError), os.fdopen(fd, "wb") as pipe:
        pipe.write(data)


def run(args: list[str], cwd: Path, env: Mapping[str, str], timeout: float,
        input: str | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m fractal ARGS`` as a child of the server; the result as
    ``subprocess.run(..., input=input, capture_output=True, text=True, timeout=timeout)``
    gives it (stdin is ``/dev/null`` without ``input``; raises ``subprocess.TimeoutExpired``
    after killing the child)."""
    cmd = [sys.executable, "-m", "fractal", *args]
    server = _server() if ENABLED else None
    if server is None:
        return subprocess.run(cmd, cwd=cwd, text=True, capture_output=True, env=dict(env),
                              timeout=timeout, check=False, input=input,
                              stdin=subprocess.DEVNULL if input is None else None)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    if input is None:
        null = os.open(os.devnull, os.O_RDONLY)
    else:
        null, in_w = os.pipe()
        threading.Thread(target=_feed, args=(in_w, input.encode()), daemon=True).start()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        conn.connect(server.socket)
        request = {"argv": list(args), "cwd": os.path.abspath(cwd), "env": dict(env)}
        socket.send_fds(conn, [json.dumps(request).encode()], [null, out_w, err_w])
    finally:
        for fd in (null, out_w, err_w):
            os.close(fd)
    deadline = time.monotonic() + timeout
    pid = 0
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    try:
        conn.settimeout(timeout)
        pid = int(conn.recv(64).split()[1])
        with selectors.DefaultSelector() as pipes:
            for fd in chunks:
                pipes.register(fd, selectors.EVENT_READ)
            while pipes.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                for key, _ in pipes.select(left):
                    data = os.read(key.fd, 1 << 16)
                    if data:
                        chunks[key.fd].append(data)
                    else:
                        pipes.unregister(key.fd)
        conn.settimeout(max(0.0, deadline - time.monotonic()))
        _, code, cpu = conn.recv(64).split()
        returncode = int(code)
        CLI_SPAWNS[0] += 1
        CLI_CPU[0] += float(cpu)
        if CALL_LOG:
            with open(CALL_LOG, "a") as fh:
                fh.write(json.dumps({"argv": list(args), "cpu": float(cpu),
                                     "test": os.environ.get("PYTEST_CURRENT_TEST", "")}) + "\n")
    except TimeoutError:
        if pid:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        raise subprocess.TimeoutExpired(cmd, timeout, output=b"".join(chunks[out_r]),
                                        stderr=b"".join(chunks[err_r])) from None
    finally:
        conn.close()
        os.close(out_r)
        os.close(err_r)
    return subprocess.CompletedProcess(cmd, returncode, _text(b"".join(chunks[out_r])),
                                       _text(b"".join(chunks[err_r])))


if __name__ == "__main__":
    serve(sys.argv[1])
