"""Inside a node's sandbox, ``fractal <verb>`` is forwarded to the node's relay (the
socket its supervisor serves, ``runtime/relay.py``): argv, working directory, stdin,
the ``_NODE`` claim, the launch's token (``FRACTAL_RELAY_TOKEN``) and the content of
each file option (``--task-file``, ``--items``, ``--brief``, read here, inside the
sandbox: ``domain.relayed``) go out, the verb's stdout, stderr and exit code come back. The
sandbox sets ``FRACTAL_RELAY`` to the socket; the identity the verb runs under is the
socket's node, whatever this process sends."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["forward", "short_address"]


def short_address(path: Path) -> tuple[str, int]:
    """(an address for ``path`` under the 108-byte limit of a socket path, the directory
    descriptor it goes through: close it after the bind or connect)."""
    fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    return f"/proc/self/fd/{fd}/{path.name}", fd


def _file_content(path: Path) -> bytes:
    """The bytes of the regular file at ``path``, read here inside the sandbox (the relay
    never opens a path the agent names). Raises OSError, or ValueError for something
    other than a regular file or one over ``TASK_FILE_CAP`` bytes."""
    import stat  # deferred: only a file option reads (start-up cost)

    from fractal.domain.limits import TASK_FILE_CAP, over_cap  # deferred: as above

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("not a regular file")
        data = handle.read(TASK_FILE_CAP + 1)
    if len(data) > TASK_FILE_CAP:
        raise ValueError(over_cap(str(path), TASK_FILE_CAP))
    return data


def forward(relay: str, argv: Sequence[str]) -> tuple[int, bytes, bytes]:
    """Send ``argv`` to the relay at ``relay``; return the verb's (exit code, stdout,
    stderr). Stdin is read and sent only when an argument is ``-`` (the CLI's word for
    standard input): an agent's tool may hold a stdin open that never ends. A file
    option's file that cannot be read is refused here (exit 2), nothing sent. Raises
    OSError or ValueError when the relay cannot be reached or answers garbage."""
    import base64  # deferred: only a sandboxed command forwards (4 modules)
    import json  # deferred: start-up cost (5 modules)
    import socket  # deferred: start-up cost (6 modules)

    # deferred: only a sandboxed command forwards (1 module, no imports of its own)
    from fractal.domain.relayed import FILE_OPTIONS, path_values

    files: dict[str, str] = {}
    for index, option, value, _ in path_values(argv):
        if option in FILE_OPTIONS:
            try:
                files[str(index)] = base64.b64encode(_file_content(Path(value))).decode()
            except (OSError, ValueError) as exc:
                return 2, b"", (f"Error: Invalid value for '{option}': cannot read {value}: "
                                f"{exc}; give a regular UTF-8 file\n").encode()
    wanted = "-" in argv and sys.stdin is not None and not sys.stdin.isatty()
    stdin = sys.stdin.buffer.read() if wanted else b""
    request = {"argv": list(argv), "cwd": os.getcwd(), "node": os.environ.get("_NODE"),
               "stdin": base64.b64encode(stdin).decode(), "files": files,
               "token": os.environ.get("FRACTAL_RELAY_TOKEN", "")}  # domain.sandbox.TOKEN_ENV
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        address, fd = short_address(Path(relay))
        try:
            sock.connect(address)
        finally:
            os.close(fd)
        sock.sendall(json.dumps(request).encode() + b"\n")
        chunks: list[bytes] = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    reply = json.loads(b"".join(chunks))
    if not isinstance(reply, dict):
        raise ValueError("the relay's answer is not an object")
    code = reply.get("rc", 1)
    return (code if isinstance(code, int) else 1,
            base64.b64decode(str(reply.get("stdout", ""))),
            base64.b64decode(str(reply.get("stderr", ""))))
