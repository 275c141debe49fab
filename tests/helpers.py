"""Shared test helpers: bounded waits and small git fixtures.

Waits are conditions with deadlines, never bare sleeps. Every timeout is multiplied by
``FRACTAL_TEST_TIMEOUT_SCALE`` (default 1) for slow machines.

``make_repo`` builds a repository once per branch name and session and copies it after
that (``TEMPLATES_ENV`` names the session's template directory; without it every call
runs git).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

SCALE = float(os.environ.get("FRACTAL_TEST_TIMEOUT_SCALE", "1"))

TEMPLATES_ENV = "FRACTAL_TEST_TEMPLATES"
"""Environment variable naming the directory of this session's template repositories."""


class WaitTimeout(AssertionError):
    """A wait_until predicate never became truthy before its deadline."""


def wait_until(predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.02,
               message: str = "") -> T:
    """Poll ``predicate`` until it returns a truthy value; return that value.

    Raises WaitTimeout (an AssertionError) after ``timeout * SCALE`` seconds, with
    ``message`` and the last value seen.
    """
    deadline = time.monotonic() + timeout * SCALE
    last: T | None = None
    while True:
        last = predicate()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"timed out after {timeout * SCALE:.1f}s: {message} (last={last!r})")
        time.sleep(interval)


def git(cwd: Path, *args: str) -> str:
    """Run git in ``cwd``; return stripped stdout; raise CalledProcessError on failure."""
    out = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)
    return out.stdout.strip()


def make_repo(path: Path, branch: str = "main") -> Path:
    """Create a git repository at ``path`` with one commit on ``branch`` and a local identity.

    The repository holds ``README.md`` committed as "initial commit" by Test User. Within a
    test session it is a copy of a template built the first time ``branch`` is asked for.
    """
    templates = os.environ.get(TEMPLATES_ENV)
    if not templates:
        return _build_repo(path, branch)
    template = Path(templates) / f"repo-{branch}"
    if not template.exists():
        staging = Path(tempfile.mkdtemp(dir=templates))
        _build_repo(staging / "repo", branch)
        try:
            (staging / "repo").rename(template)
        except OSError:  # another thread won the race: its template is as good
            shutil.rmtree(staging, ignore_errors=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(template, path, symlinks=True, dirs_exist_ok=True)
    return path


def _build_repo(path: Path, branch: str) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", branch)
    git(path, "config", "user.name", "Test User")
    git(path, "config", "user.email", "test@example.com")
    (path / "README.md").write_text("sample project\n")
    git(path, "add", "README.md")
    git(path, "commit", "-q", "-m", "initial commit")
    return path


def force_status(db_path: Path, node: str, status: str) -> None:
    """Set a node's status directly in the database, as a test's setup (the product writes
    statuses only through ``Ledger.move``)."""
    import sqlite3

    with sqlite3.connect(db_path) as conn:
        conn.execute("UPDATE nodes SET status = ? WHERE node = ?", (status, node))
