"""The sandbox's process side: whether bubblewrap runs on this machine (``missing``) and
the argv that runs a program inside it (``wrap``). The policy (which paths, which mode)
is ``domain.sandbox``; this module only starts programs with it."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from fractal.domain.sandbox import Mount, bwrap_args
from fractal.errors import SpawnError
from fractal.procs.commands import run_capture

__all__ = ["BWRAP", "missing", "wrap"]

BWRAP = "bwrap"
_PROBE_TIMEOUT = 10.0  # seconds the one probe launch may take
_missing: str | None = None  # the probe's answer, once per process
_RELAYED = "INT,TERM,HUP"  # the stop signals bwrap ignores and its program acts on


def missing() -> str:
    """Why no sandbox can run here ("" when one can): not Linux, no ``bwrap`` on PATH,
    or a probe launch (``bwrap --ro-bind / / --unshare-pid ... true``) that fails, as it
    does where unprivileged user namespaces are off. Probed once per process."""
    global _missing
    if _missing is None:
        _missing = _probe()
    return _missing


def _probe() -> str:
    if not sys.platform.startswith("linux"):
        return f"bubblewrap sandboxes only run on Linux (this is {sys.platform})"
    if shutil.which(BWRAP) is None:
        return "bwrap (bubblewrap) is not on PATH"
    argv = wrap(["true"], [], relay=None, cwd="/")
    try:
        code, output = run_capture(argv, cwd=Path("/"), timeout=_PROBE_TIMEOUT)
    except (OSError, SpawnError) as exc:
        return f"bwrap could not run: {exc}"
    if code != 0:
        why = (output.strip().splitlines() or [f"exit {code}"])[-1]
        return f"bwrap cannot make a sandbox here ({why})"
    return ""


def wrap(argv: Sequence[str], mounts: Sequence[Mount], *, relay: str | None,
         cwd: str, token: str | None = None,
         setenv: Mapping[str, str] | None = None) -> list[str]:
    """``argv`` run inside bubblewrap with ``mounts`` (``domain.sandbox.bwrap_args``),
    starting in ``cwd``, with the relay's ``token`` and the variables of ``setenv`` in its
    environment when given. The program's exec errors come back as bwrap's exit 1 with its
    message on stderr; a missing bwrap is an OSError at spawn.

    bwrap itself runs with SIGINT, SIGTERM and SIGHUP ignored (``env --ignore-signal``)
    and resets them for the program (``env --default-signal``): a stop signals the whole
    group, and bwrap dying of it at once would kill the program (``--die-with-parent``)
    before it could act on a soft interrupt; SIGKILL still ends both."""
    binary = shutil.which(BWRAP) or BWRAP
    env = shutil.which("env") or "/usr/bin/env"
    return [env, f"--ignore-signal={_RELAYED}", binary,
            *bwrap_args(mounts, relay=relay, chdir=os.path.abspath(cwd), token=token,
                       setenv=setenv), "--",
            env, f"--default-signal={_RELAYED},QUIT", *argv]
