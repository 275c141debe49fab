"""Inside a node's sandbox, ``fractal <verb>`` is forwarded to the node's relay (the
socket its supervisor serves, ``runtime/relay.py``): argv, working directory, stdin,
the ``_NODE`` claim and the launch's token (``FRACTAL_RELAY_TOKEN``) go out, the verb's stdout, stderr and exit code come back. The
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


def forward(relay: str, argv: Sequence[str]) -> tuple[int, bytes, bytes]:
    """Send ``argv`` to the relay at ``relay``; return the verb's (exit code, stdout,
    stderr). Stdin is read and sent only when an argument is ``-`` (the CLI's word for
    standard input): an agent's tool may hold a stdin open that never ends. Raises
    OSError or ValueError when the relay cannot be reached or answers garbage."""
    import base64  # deferred: only a sandboxed command forwards (4 modules)
    import json  # deferred: start-up cost (5 modules)
    import socket  # deferred: start-up cost (6 modules)

    wanted = "-" in argv and sys.stdin is not None and not sys.stdin.isatty()
    stdin = sys.stdin.buffer.read() if wanted else b""
    request = {"argv": list(argv), "cwd": os.getcwd(), "node": os.environ.get("_NODE"),
               "stdin": base64.b64encode(stdin).decode(),
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
