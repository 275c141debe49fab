"""Crash logs: where the traceback of an exception nobody expected is saved, and the line
that names it. Shared by the two front ends, which do not import each other: the CLI
(``fractal.cli.crash.report_crash``, exit 3) and the dashboard (a key's verb that failed,
``fractal.tui.verbs.fault``).

A refusal (``FractalError``) is the user's to fix and never gets here. The log lives in the tree's ``.fractal/<root>/logs/`` when
the command got as far as finding its tree (that directory is git-ignored), else in
``$XDG_STATE_HOME/fractal/`` (default ``~/.local/state/fractal/``). Directories are created
0700 and logs 0600 (a traceback may show paths and values); the newest ``KEEP`` logs are
kept in each directory.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from fractal import __version__

__all__ = ["KEEP", "CrashSite", "crash_dirs", "crash_line", "locate_tree", "one_line",
           "save_crash", "state_dir"]

KEEP = 20  # crash logs kept per directory (older ones are deleted)
_MESSAGE_CHARS = 200


@dataclass
class CrashSite:
    """Where the running command has got to: the tree's data dir once a command found its
    tree (the CLI's ``fractal.cli.context`` notes it), so a crash after that is logged with it."""

    data_dir: Path | None = None
    argv: list[str] = field(default_factory=list)


def locate_tree(site: CrashSite) -> None:
    """Note the tree the crashed command ran in: the one holding its ``--path`` (or the
    current directory). Best effort: a crash while looking leaves the site as it was."""
    if site.data_dir is not None:
        return
    where = Path.cwd()
    args = site.argv
    for index, word in enumerate(args):
        if word == "--path" and index + 1 < len(args):
            where = Path(args[index + 1])
        elif word.startswith("--path="):
            where = Path(word.split("=", 1)[1])
    try:
        from fractal.tree import find_tree  # deferred: start-up cost (4 modules)

        site.data_dir = find_tree(where).data_dir
    except Exception:  # no tree, no repository, or the lookup itself broke
        site.data_dir = None


def state_dir(environ: dict[str, str] | None = None) -> Path:
    """``$XDG_STATE_HOME/fractal`` (an absolute XDG_STATE_HOME only), else
    ``~/.local/state/fractal``."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_STATE_HOME", "")
    root = Path(base) if base and Path(base).is_absolute() else Path.home() / ".local" / "state"
    return root / "fractal"


def crash_dirs(site: CrashSite) -> list[Path]:
    """Where a crash log may go, in order of preference."""
    found = [site.data_dir / "logs"] if site.data_dir is not None else []
    return [*found, state_dir()]


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if len(text) > _MESSAGE_CHARS:
        text = text[:_MESSAGE_CHARS - 3] + "..."
    name = type(exc).__name__
    return f"{name}: {text}" if text else name


def _create(directory: Path, name: str) -> tuple[Path, int]:
    """A new file ``<name>.log`` in ``directory`` (``<name>-2.log``... when a crash of the
    same process in the same second has one: a dashboard's keys can fault twice in a
    second), opened for writing; (its path, its descriptor). Raises OSError."""
    for n in range(1, 100):
        path = directory / (f"{name}.log" if n == 1 else f"{name}-{n}.log")
        try:
            return path, os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue
    raise FileExistsError(f"{directory / name}-*.log: 99 crash logs in one second")


def _write(directory: Path, exc: BaseException, site: CrashSite) -> Path:
    """Write the crash log for ``exc`` into ``directory``; return its path. Raises OSError."""
    import platform  # deferred: start-up cost (1 module)
    import traceback  # deferred: start-up cost (2 modules)

    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    body = "".join([
        f"fractal {__version__} crashed at {stamp}\n",
        f"command: fractal {' '.join(site.argv)}\n",
        f"cwd: {os.getcwd()}\n",
        f"python: {sys.version.split()[0]} on {platform.platform()}\n\n",
        *traceback.format_exception(exc),
    ])
    path, fd = _create(directory, f"crash-{stamp}-{os.getpid()}")
    with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as handle:
        handle.write(body)
    _prune(directory)
    return path


def _prune(directory: Path) -> None:
    """Delete all but the newest KEEP crash logs of ``directory`` (best effort)."""
    try:
        logs = sorted(directory.glob("crash-*.log"), key=lambda p: p.stat().st_mtime)
        for old in logs[:-KEEP]:
            old.unlink(missing_ok=True)
    except OSError:
        pass


def save_crash(exc: BaseException, site: CrashSite,
               problems: list[str] | None = None) -> Path | None:
    """Write ``exc``'s crash log into the first of ``crash_dirs(site)`` that takes it and
    return its path; None when none could (each directory's error appended to
    ``problems``). Never raises OSError."""
    for directory in crash_dirs(site):
        try:
            return _write(directory, exc, site)
        except OSError as err:
            if problems is not None:
                problems.append(f"{directory}: {err.strerror or err}")
    return None


def crash_line(exc: BaseException, path: Path) -> str:
    """The one line that names a crash and its log."""
    return (f"Internal error ({one_line(exc)}); the traceback is in {path} "
            "(a fractal bug: please report it with that file)")
