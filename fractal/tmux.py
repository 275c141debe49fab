"""The tmux boundary: session names, launch, tri-state liveness probe, attach, capture.

Only this module calls tmux. Every call names its server explicitly with ``-S <socket>``
(a node records the socket it was started on, so a shell with another ``TMUX_TMPDIR`` still
probes the right server) and every target is exact: ``=name`` for a session, ``=name:`` for
its windows and panes (a bare ``name`` is a prefix/fnmatch match and ``a`` would find ``ab``;
even ``list-panes -s -t =a`` finds ``ab``, hence the colon).

Every call is one plain ``tmux`` client (no tmux library: importing one costs more than
the call itself on the start path, and ``probe`` runs on the fast read paths too). The
stdlib pieces only some calls need (``hashlib`` for a session name, ``shlex`` for a
launch, ``shutil`` for an attach's absolute path) are imported where they are used:
``node kill`` and the reads load this module and need none of them. A client is run as
plain ``tmux``, found on ``PATH`` by the exec itself (no lookup first).

Liveness is ALIVE, GONE or UNKNOWN. Callers' rule: nothing destructive (healing a node,
closing rows, killing processes) may ever act on UNKNOWN; only GONE is evidence.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import subprocess
import time
from collections.abc import Mapping, Sequence
from enum import Enum
from pathlib import Path

from fractal.errors import TmuxError

SOCKET_ENV = "FRACTAL_TMUX_SOCKET"
_TIMEOUT = 5.0  # seconds; a tmux client that takes longer means a wedged server (UNKNOWN)
_ATTEMPTS = 3  # tries of a client that met a server shutting down (has-session, new-session)
_RETRY_DELAY = 0.05  # seconds between those tries
_PANE_SIZE = (200, 50)  # columns, rows of a detached session's window
_NOT_INSTALLED = "tmux is not installed; run make bootstrap or apt-get install tmux"
_SERVER_EXITING = ("server exited unexpectedly", "lost server")  # a client met a dying server
_GONE_MARKERS = ("no server running", "can't find session", "no such file or directory")
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


class Liveness(Enum):
    """Answer of ``probe``: only GONE is evidence that a session ended."""

    ALIVE = "alive"
    GONE = "gone"
    UNKNOWN = "unknown"


def socket_path(env: Mapping[str, str] | None = None) -> Path:
    """Socket of the tmux server fractal uses.

    ``$FRACTAL_TMUX_SOCKET`` when set, else the user's default server named explicitly:
    ``${TMUX_TMPDIR:-/tmp}/tmux-<uid>/default``. ``env`` defaults to ``os.environ``.
    Raises TmuxError when ``$FRACTAL_TMUX_SOCKET`` names something that exists and is not
    a socket: tmux deletes a path it cannot connect to before starting a server there, so
    a file named by mistake (or by a node) would be lost.
    """
    env = os.environ if env is None else env
    if env.get(SOCKET_ENV):
        named = Path(env[SOCKET_ENV])
        try:
            mode = named.stat().st_mode
        except FileNotFoundError:
            return named
        except OSError as exc:
            raise TmuxError(f"{SOCKET_ENV}={named} cannot be checked ({exc.strerror}); "
                            "point it at a tmux socket, or unset it") from exc
        if not stat.S_ISSOCK(mode):
            raise TmuxError(f"{SOCKET_ENV}={named} names an existing file that is not a "
                            "socket; fractal refuses to let tmux replace it: point it at a "
                            "tmux socket or a path that does not exist yet, or unset it")
        return named
    return Path(env.get("TMUX_TMPDIR") or "/tmp") / f"tmux-{os.getuid()}" / "default"


def session_name(repo: Path, branch: str) -> str:
    """Session name for a node: ``fx-<repo basename>-<branch>-<6 hex>``.

    Characters outside ``[A-Za-z0-9_-]`` become ``-`` (tmux rewrites ``.`` and ``:``, which
    would break exact matching); the hash of the resolved repo path and branch keeps two
    repositories with the same basename apart.
    """
    import hashlib  # deferred: start-up cost (3 modules)

    digest = hashlib.sha1(f"{repo.resolve()}\0{branch}".encode()).hexdigest()[:6]
    return _UNSAFE.sub("-", f"fx-{repo.name}-{branch}") + f"-{digest}"


def _tmux(socket: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``tmux -S socket args``; raise TmuxError when the binary is missing."""
    try:
        return subprocess.run(["tmux", "-S", str(socket), *args], capture_output=True,
                              text=True, errors="replace", timeout=_TIMEOUT, check=False,
                              stdin=subprocess.DEVNULL)
    except FileNotFoundError:  # no tmux on PATH
        raise TmuxError(_NOT_INSTALLED) from None


def _server_exiting(stderr: str) -> bool:
    """Did this client reach a server in the middle of shutting down (ask again)?"""
    text = stderr.lower()
    return any(marker in text for marker in _SERVER_EXITING)


def probe(name: str, socket: Path) -> Liveness:
    """Is session ``name`` (exact) alive on the server at ``socket``?

    ALIVE when ``has-session`` succeeds. GONE when the socket file is missing (even without
    a tmux binary: no server can listen there), no server listens on it, or the server has no
    such session. UNKNOWN when tmux is not installed, times out (5 s), or fails any other way
    (e.g. permission denied); a dropped connection is asked again twice. Never act on UNKNOWN.
    """
    try:
        socket.stat()
    except (FileNotFoundError, NotADirectoryError):  # nothing can listen there: definitive
        return Liveness.GONE
    except OSError:
        return Liveness.UNKNOWN
    for attempt in range(_ATTEMPTS):
        try:
            proc = _tmux(socket, "has-session", "-t", f"={name}")
        except (TmuxError, OSError, subprocess.TimeoutExpired):
            return Liveness.UNKNOWN
        if proc.returncode == 0:
            return Liveness.ALIVE
        stderr = proc.stderr.lower()
        if any(marker in stderr for marker in _GONE_MARKERS):
            return Liveness.GONE
        if not _server_exiting(stderr) or attempt + 1 == _ATTEMPTS:
            return Liveness.UNKNOWN
        # A server shutting down drops the connection; ask again for a definitive answer.
        time.sleep(_RETRY_DELAY)
    return Liveness.UNKNOWN


def _check_name(name: str) -> None:
    if not name or "." in name or ":" in name:
        raise TmuxError(f"invalid tmux session name {name!r}: it must be non-empty without "
                        "'.' or ':'; build it with fractal.tmux.session_name()")


def launch(name: str, command: Sequence[str], *, cwd: Path, socket: Path,
           env: Mapping[str, str] | None = None) -> int:
    """Create detached session ``name`` whose pane process runs ``command``; return its pid.

    ``command`` words are shell-quoted. ``env`` entries are set in the pane's environment with
    ``new-session -e`` (tmux >= 3.2); without them the pane inherits the server's global
    environment, which is this process's environment only when this call starts the server.
    The socket's directory is created 0700 if missing; the window is 200x50 and
    ``remain-on-exit`` is off, so the session ends with its pane process. Raises TmuxError
    when tmux is missing, the name is invalid, the session already exists, or tmux refuses.

    A client that reaches a server in the middle of exiting (its last session has just
    closed) is tried again, up to three times. One tmux client does it all: ``new-session -P`` prints the pane's pid as it creates the
    pane (a command that exits at once cannot make the answer fail), and the chained
    ``set-option`` applies to the new window before the server's event loop can see the
    pane process exit.
    """
    _check_name(name)
    socket.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    argv = ["new-session", "-d", "-P", "-F", "#{pane_pid}", "-s", name, "-c", str(cwd),
            "-x", str(_PANE_SIZE[0]), "-y", str(_PANE_SIZE[1])]
    for key, value in (env or {}).items():
        argv += ["-e", f"{key}={value}"]
    import shlex  # deferred: start-up cost (1 module)

    argv += [shlex.join(command), ";", "set-option", "-w", "remain-on-exit", "off"]
    for attempt in range(_ATTEMPTS):
        try:
            proc = _tmux(socket, *argv)
        except subprocess.TimeoutExpired as err:
            raise TmuxError(f"tmux did not answer within {_TIMEOUT:.0f}s creating session "
                            f"{name} on {socket}; check `tmux -S {socket} list-sessions`") from err
        except OSError as err:
            raise TmuxError(f"tmux could not be run to create session {name}: {err}") from err
        # The server was exiting (its last session had just closed) when this client
        # reached it: the session went with it, and the next client starts a new server.
        if proc.returncode == 0 or not _server_exiting(proc.stderr) \
                or attempt + 1 == _ATTEMPTS:
            break
        time.sleep(_RETRY_DELAY)
    first = proc.stdout.split()[:1]
    if proc.returncode != 0 and not first:
        if "duplicate session" in proc.stderr:
            raise TmuxError(f"session {name} already exists on {socket}; attach to it or "
                            "kill it")
        raise TmuxError(f"tmux could not create session {name} on {socket}: "
                        f"{proc.stderr.strip() or f'exit {proc.returncode}'}")
    if not first or not first[0].isdigit():
        raise TmuxError(f"tmux created session {name} but reported no pane pid; "
                        f"check `tmux -S {socket} list-panes -t ={name}`")
    return int(first[0])


def kill_session(name: str, socket: Path) -> bool:
    """Kill session ``name`` (exact); True if tmux killed it, False if it was not there.

    Raises TmuxError when tmux is not installed.
    """
    return killing_session(name, socket).wait()


class SessionKill:
    """A ``kill-session`` client started by ``killing_session`` and not yet waited for."""

    def __init__(self, client: subprocess.Popen[bytes]) -> None:
        self._client = client

    def wait(self) -> bool:
        """Wait for the client: True if tmux killed the session, False if it was not there
        or tmux did not answer within the client timeout (the client is then stopped)."""
        try:
            return self._client.wait(timeout=_TIMEOUT) == 0
        except subprocess.TimeoutExpired:
            self._client.kill()  # as subprocess.run does with a client past its timeout
            self._client.wait()
            return False


def killing_session(name: str, socket: Path) -> SessionKill:
    """Start killing session ``name`` (exact) and return at once, so the caller can wait
    for other things (a kill, for the node's processes to die) while tmux does it; the
    result's ``wait`` says how it went. Raises TmuxError when tmux is not installed."""
    try:
        client = subprocess.Popen(["tmux", "-S", str(socket), "kill-session", "-t", f"={name}"],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
    except FileNotFoundError:  # no tmux on PATH
        raise TmuxError(_NOT_INSTALLED) from None
    return SessionKill(client)


def pane_pid(name: str, socket: Path) -> int | None:
    """Pid of the first pane process of session ``name`` (exact), or None if there is none."""
    try:
        proc = _tmux(socket, "list-panes", "-s", "-t", f"={name}:", "-F", "#{pane_pid}")
    except (TmuxError, subprocess.TimeoutExpired):
        return None
    first = proc.stdout.split()[:1] if proc.returncode == 0 else []
    return int(first[0]) if first and first[0].isdigit() else None


def session_of_pane(pid: int, socket: Path) -> str | None:
    """The name of the session holding the pane whose first process is ``pid`` on the
    server at ``socket``, or None (no such pane, no server, no tmux)."""
    try:
        proc = _tmux(socket, "list-panes", "-a", "-F", "#{pane_pid} #{session_name}")
    except (TmuxError, subprocess.TimeoutExpired):
        return None
    for line in proc.stdout.splitlines() if proc.returncode == 0 else []:
        pane, _, session = line.partition(" ")
        if pane == str(pid):
            return session
    return None


def capture_pane(name: str, socket: Path) -> str:
    """Text of the session's active pane, scrollback included (trailing blank lines dropped).

    Raises TmuxError when tmux is missing or the session does not exist.
    """
    proc = _tmux(socket, "capture-pane", "-p", "-J", "-S", "-", "-E", "-", "-t", f"={name}:")
    if proc.returncode != 0:
        raise TmuxError(f"cannot capture session {name} on {socket}: {proc.stderr.strip()}")
    return proc.stdout.rstrip("\n") + "\n" if proc.stdout.strip() else ""


def kill_server(socket: Path) -> None:
    """Kill the tmux server at ``socket``; a server that is not running is not an error."""
    with contextlib.suppress(subprocess.TimeoutExpired, TmuxError):  # TmuxError: no tmux
        _tmux(socket, "kill-server")


def _inside(socket: Path) -> bool:
    """True when this process runs in a pane of the server at ``socket`` ($TMUX names it)."""
    inside = os.environ.get("TMUX", "").split(",")[0]
    return bool(inside) and os.path.realpath(inside) == os.path.realpath(socket)


def current_client(socket: Path) -> str | None:
    """The tty of a client showing this process's session on ``socket``, or None.

    None outside that server, and inside a session no client is attached to (a detached
    session has no client to switch: tmux would answer ``no current client``).
    """
    pane = os.environ.get("TMUX_PANE", "")
    if not _inside(socket) or not pane:
        return None
    try:
        here = _tmux(socket, "display-message", "-p", "-t", pane, "#{session_id}")
        if here.returncode != 0 or not here.stdout.strip():
            return None
        clients = _tmux(socket, "list-clients", "-t", here.stdout.strip(), "-F",
                        "#{client_tty}")
    except (TmuxError, subprocess.TimeoutExpired):
        return None
    ttys = clients.stdout.split() if clients.returncode == 0 else []
    return ttys[0] if ttys else None


def switch_client(name: str, socket: Path) -> bool:
    """Show session ``name`` (exact) in the client this process's pane is displayed on.

    True when tmux switched it; False when there is no such client (outside tmux, on
    another server, or in a detached session) or tmux refused.
    """
    client = current_client(socket)
    if client is None:
        return False
    try:
        proc = _tmux(socket, "switch-client", "-c", client, "-t", f"={name}")
    except (TmuxError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


def attach_argv(name: str, socket: Path) -> tuple[list[str], dict[str, str]]:
    """The argv and environment of a tmux client attached to session ``name`` (exact).

    ``$TMUX`` is dropped from the environment: from inside another (or a detached) pane
    tmux refuses to nest a client while it is set. Raises TmuxError without tmux.
    """
    import shutil  # deferred: start-up cost (7 modules)

    binary = shutil.which("tmux")
    if binary is None:
        raise TmuxError(_NOT_INSTALLED)
    env = {k: v for k, v in os.environ.items() if k != "TMUX"}
    return [binary, "-S", str(socket), "attach-session", "-t", f"={name}"], env


def attach(name: str, socket: Path) -> None:
    """Show session ``name`` (exact) on this terminal.

    Inside a pane of the same server whose session a client shows, that client is
    switched (``switch-client``) and this returns. Otherwise this process is replaced
    by a tmux client (nested, with ``$TMUX`` unset, when run from another pane).
    Raises TmuxError when tmux is not installed.
    """
    if switch_client(name, socket):
        return
    argv, env = attach_argv(name, socket)
    os.execve(argv[0], argv, env)


def attach_foreground(name: str, socket: Path) -> int:
    """Run a tmux client on session ``name`` (exact) in this terminal until it detaches;
    return its exit code. For a full-screen app that suspended itself first. Raises
    TmuxError without tmux."""
    argv, env = attach_argv(name, socket)
    return subprocess.run(argv, env=env, check=False).returncode
