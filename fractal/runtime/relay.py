"""A node's relay: the Unix socket its supervisor serves, through which the ``fractal``
commands its sandboxed agent runs reach the ledger.

The database is hidden inside the sandbox; the socket (``procs.confine.relay_socket``:
``<tree data dir>/relay/<branch>.sock``, hidden too) is bound into that node's sandbox only, so who is asking is
known by which socket was reached, never by anything the caller says. A request is one
JSON line ``{"argv": [...], "cwd": DIR, "stdin": B64, "files": {ARGV INDEX: B64},
"node": _NODE or null, "token": TOKEN}`` of at most MAX_REQUEST bytes, sent within
READ_TIMEOUT seconds; at most MAX_CALLS connections are answered at once. The token is
the secret of the node's current launch (``rotate``: a fresh one per launch, set in that launch's sandbox environment and nowhere else); a request
without it is refused and recorded as a failed ``relay`` event of the node: another
tree's agent can reach this socket (only this tree's data dir is hidden from it) but
cannot know the token (each launch has its own PID namespace, so no other sandbox can
read this launch's environment). The peer's uid (SO_PEERCRED) tells nothing here: every
agent runs as the same user. With the token, and a verb the agent protocol uses
(``domain.relayed``: anything else, the hidden ``node _run`` included, is refused and recorded), the supervisor runs
``python -m fractal ARGV`` as its own child, outside the sandbox and its PID namespace.
So the relay never opens a path the agent names: a file option's content is read by the
client, inside the sandbox, and the verb reads a private copy; ``--path`` must resolve
to the node's worktree or inside it and becomes the worktree. The verb acts in the
relay's own tree, as the relay's own node (``domain.relayed``): a ``cwd`` inside the
worktree that lies in another repository (a nested one, a ``.git`` file naming another
tree's git dir) is refused and recorded; the verb always runs in the worktree itself,
with the run's launch environment, ``_NODE`` set to this node's dir (the request's
``node`` is never read), no relay variable and no token (nothing the verb starts can
reach or pose as this relay), and ``FRACTAL_CONFINED`` (the programs the verb starts
for the agent, ``fractal commit``'s hooks, run in the node's sandbox), once ``before``
has run (the supervisor's adoption of the agent's new
git objects: the verb's git finds them in the shared store). The answer is one JSON line ``{"rc": N, "stdout": B64, "stderr": B64}``.

A small server thread, not the loop's waker: the loop blocks for a whole step inside
``launch._supervise`` and a command the agent runs must be answered during that step;
each connection gets its own thread and the verb its own process, so the loop's state is
never touched from the server (single owner kept).
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import socket
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from fractal.domain.limits import TASK_FILE_CAP
from fractal.domain.relayed import (
    FILE_OPTIONS,
    foreign_repository,
    path_values,
    verb_env,
    verb_refusal,
)
from fractal.procs.commands import run_split
from fractal.procs.confine import CONFINED_ENV
from fractal.relayclient import short_address
from fractal.tree import NodePaths

__all__ = ["MAX_CALLS", "MAX_REQUEST", "READ_TIMEOUT", "RELAY_EVENT", "Relay"]

log = logging.getLogger(__name__)

MAX_REQUEST = 4 * TASK_FILE_CAP  # bytes of one request line (argv, cwd, stdin, files)
READ_TIMEOUT = 10.0  # seconds a caller has to send its whole request (and read the answer)
MAX_CALLS = 8  # connections answered at once; one more is refused at once, unread
VERB_TIMEOUT = 3600.0  # seconds one forwarded command may run
RELAY_EVENT = "relay"  # the event of a request refused for a missing or stale token


class Relay:
    """The relay of one node (see the module docstring)."""

    def __init__(self, paths: NodePaths, path: Path, env: dict[str, str],
                 before: Callable[[], None] | None = None) -> None:
        self.paths = paths
        self.path = path
        self.env = env
        self.before = before  # run before each accepted command (sandboxing.adopt_objects)
        self._sock: socket.socket | None = None
        self._token = ""
        self._calls = threading.BoundedSemaphore(MAX_CALLS)  # connections being answered
        self.rotate()

    def rotate(self) -> str:
        """A fresh token for the next launch (64 hex digits); the one before it is no
        longer accepted."""
        import secrets  # deferred: only a sandboxed supervisor makes tokens (start-up cost)

        self._token = secrets.token_hex(32)
        return self._token

    def start(self) -> None:
        """Bind the socket (mode 0600 in a 0700 directory) and serve it on a daemon
        thread. Raises OSError when it cannot be bound."""
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.path.unlink(missing_ok=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        address, fd = short_address(self.path)
        try:
            old = os.umask(0o177)
            try:
                sock.bind(address)
            finally:
                os.umask(old)
        finally:
            os.close(fd)
        sock.listen(16)
        self._sock = sock
        threading.Thread(target=self._serve, daemon=True, name="fractal-relay").start()

    def stop(self) -> None:
        """Close and remove the socket."""
        sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes the accept; close alone may not
            sock.close()
            self.path.unlink(missing_ok=True)

    def _serve(self) -> None:
        while True:
            sock = self._sock
            if sock is None:
                return
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            if not self._calls.acquire(blocking=False):
                _refuse_busy(conn)
                continue
            threading.Thread(target=self._answer, args=(conn,), daemon=True,
                             name="fractal-relay-call").start()

    def _answer(self, conn: socket.socket) -> None:
        try:
            with conn:
                conn.settimeout(READ_TIMEOUT)
                try:
                    request = _read_line(conn)
                    conn.settimeout(None)  # the verb's answer may take VERB_TIMEOUT
                    reply = self.run(json.loads(request))
                except (OSError, ValueError, KeyError, TypeError) as exc:
                    reply = {"rc": 1, "stdout": "",
                             "stderr": _b64(f"Error: the relay refused the command: {exc}\n")}
                conn.settimeout(READ_TIMEOUT)
                try:
                    conn.sendall(json.dumps(reply).encode() + b"\n")
                except OSError as exc:
                    log.warning("relay: could not answer: %s", exc)
                _drop_unread(conn)
        finally:
            self._calls.release()

    def run(self, request: dict[str, object]) -> dict[str, object]:
        """Run one forwarded command as this node; returns the answer. Refused (exit 1)
        and recorded (``RELAY_EVENT``, failed): a request without the current token, a
        verb outside ``domain.relayed.RELAYED_VERBS``, a ``cwd`` in another repository
        inside the worktree (``domain.relayed.foreign_repository``), a file option
        without its content, a ``--path`` outside the node's worktree."""
        argv = request["argv"]
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
            raise ValueError("argv must be a list of strings")
        import hmac  # deferred: only a request compares (start-up cost: hashlib)

        token = self._token
        offered = request.get("token")
        if not token or not isinstance(offered, str) or not hmac.compare_digest(
                offered.encode(), token.encode()):
            return self._refuse(argv, "without the launch's token", (
                "it does not carry this launch's token (only the node's own agent may use "
                "its relay); run fractal from inside your own node's sandbox"))
        worktree = self.paths.worktree.resolve()
        cwd = Path(str(request.get("cwd") or worktree)).resolve()
        why = verb_refusal(argv)
        if why is not None:
            return self._refuse(argv, "a verb not relayed", why)
        why = foreign_repository(cwd, worktree, _repository_marks(cwd, worktree))
        if why is not None:
            return self._refuse(argv, "from another repository", why)
        if cwd != worktree and worktree not in cwd.parents:
            cwd = worktree  # only for a relative --path: the verb runs in the worktree
        files = request.get("files") or {}
        if not isinstance(files, dict):
            raise ValueError("files must be an object")
        import tempfile  # deferred: only a relayed command needs it (start-up cost)

        with tempfile.TemporaryDirectory(prefix="fractal-relay-") as scratch:
            argv, why = _placed(argv, cwd, worktree, files, Path(scratch))
            if why is not None:
                return self._refuse(argv, "a path outside the node", why)
            if self.before is not None:
                self.before()  # the agent's new objects into the shared store, checked
            # the request's "node" (the agent's _NODE) is never read: the verb is this node
            env = verb_env(self.env, str(self.paths.node_dir), {CONFINED_ENV: "1"})
            stdin = base64.b64decode(str(request.get("stdin") or ""))
            # in the worktree, whatever directory was sent: its .git is read-only in the
            # sandbox, so git from there finds this tree (a sent directory can be changed
            # into another repository between the check above and the verb's start)
            code, out, err = run_split([sys.executable, "-P", "-m", "fractal", *argv],
                                       cwd=worktree, env=env, stdin=stdin,
                                       timeout=VERB_TIMEOUT)
        return {"rc": code, "stdout": base64.b64encode(out).decode(),
                "stderr": base64.b64encode(err).decode()}

    def _refuse(self, argv: list[str], kind: str, why: str) -> dict[str, object]:
        """The answer refusing ``argv`` (exit 1, ``why`` on stderr), recorded as a failed
        ``RELAY_EVENT`` of this node (a warning in the log when the ledger cannot take
        it)."""
        # deferred: only a refused request records (the relay's start stays light)
        from fractal.store.ledger import Ledger

        words = " ".join(argv[:3])[:200]
        log.warning("relay: refused a request %s: %s", kind, words)
        try:
            Ledger(self.paths.tree.db_path).add_event(
                self.paths.branch, RELAY_EVENT, status="failed",
                metadata=f"refused {kind}: {words}")
        except Exception as exc:  # recording must never break the answer
            log.warning("relay: could not record the refusal: %s", exc)
        return {"rc": 1, "stdout": "", "stderr": _b64(
            f"Error: the relay of {self.paths.branch} refused the command: {why}\n")}


def _placed(argv: list[str], cwd: Path, worktree: Path, files: dict[object, object],
            scratch: Path) -> tuple[list[str], str | None]:
    """``argv`` with every path the agent named replaced by one the relay chose, or the
    reason it cannot be (then ``argv`` unchanged). A file option's value becomes a file
    in ``scratch`` holding the content the client sent (``files``: argv index as str ->
    base64, at most TASK_FILE_CAP bytes); ``--path`` becomes the worktree when it
    resolves (symlinks followed, relative to ``cwd``) to the worktree or inside it. The
    relay never opens a path the agent named."""
    placed = list(argv)
    for number, (index, option, value, inline) in enumerate(path_values(argv)):
        if option in FILE_OPTIONS:
            content = files.get(str(index))
            if not isinstance(content, str):
                return argv, (f"{option} {value} came without the file's content (the "
                              "fractal inside your sandbox sends it); run fractal there")
            data = base64.b64decode(content)
            if len(data) > TASK_FILE_CAP:
                return argv, f"{option}'s content is over {TASK_FILE_CAP} bytes"
            target = scratch / f"{number}{Path(value).suffix[:16]}"
            target.write_bytes(data)
            chosen = str(target)
        else:
            resolved = (cwd / value).resolve()
            if resolved != worktree and worktree not in resolved.parents:
                return argv, (f"--path {value} is not in this node's worktree "
                              f"({worktree}); a node's agent acts on its own node, and "
                              "on others by name")
            chosen = str(worktree)
        placed[index] = f"{option}={chosen}" if inline else chosen
    return placed, None


def _repository_marks(sent: Path, worktree: Path) -> list[Path]:
    """The directories from ``sent`` up to ``worktree`` (both resolved; the worktree
    excluded) that hold a ``.git`` entry (a dangling link included) or look like a git
    dir (``HEAD``, ``objects``, ``refs``): where git's search from ``sent`` would stop
    before the worktree. Empty when ``sent`` is not inside the worktree. Reads the file
    system only; runs no git in a directory the agent made."""
    if worktree not in sent.parents:
        return []
    marks: list[Path] = []
    for place in (sent, *sent.parents):
        if place == worktree:
            break
        if os.path.lexists(place / ".git") or ((place / "HEAD").exists() and (
                place / "objects").exists() and (place / "refs").exists()):
            marks.append(place)
    return marks


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _read_line(conn: socket.socket) -> bytes:
    """One newline-ended request of at most MAX_REQUEST bytes. Raises ValueError past
    the cap (nothing more is read) and OSError (TimeoutError) when the caller sends
    nothing for READ_TIMEOUT seconds."""
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = conn.recv(65536)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_REQUEST:
            raise ValueError(f"the request is larger than {MAX_REQUEST} bytes (a file "
                             f"option's content is capped at {TASK_FILE_CAP} bytes)")
        if chunk.endswith(b"\n"):
            break
    return b"".join(chunks)


def _refuse_busy(conn: socket.socket) -> None:
    """Answer a connection past MAX_CALLS with a refusal, without reading it."""
    with conn:
        conn.settimeout(1.0)
        with contextlib.suppress(OSError):
            conn.sendall(json.dumps({"rc": 1, "stdout": "", "stderr": _b64(
                f"Error: the relay refused the command: {MAX_CALLS} commands of this node "
                "are already running; wait for one to end and run it again\n")}).encode()
                + b"\n")
        _drop_unread(conn)


def _drop_unread(conn: socket.socket) -> None:
    """Discard what the caller sent that was not read and is already queued (at most
    MAX_REQUEST bytes, never waiting): a Unix socket closed with unread bytes resets its
    peer, which would then lose the answer."""
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_WR)
        conn.setblocking(False)
        dropped = 0
        while dropped <= MAX_REQUEST and (chunk := conn.recv(65536)):
            dropped += len(chunk)
