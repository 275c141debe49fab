"""Shared test helpers: bounded waits and small git fixtures.

Waits are conditions with deadlines, never bare sleeps (STYLE 17). Every timeout is
multiplied by ``FRACTAL_TEST_TIMEOUT_SCALE`` (default 1) for slow machines.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

SCALE = float(os.environ.get("FRACTAL_TEST_TIMEOUT_SCALE", "1"))


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
    """Create a git repository at ``path`` with one commit on ``branch`` and a local identity."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", branch)
    git(path, "config", "user.name", "Test User")
    git(path, "config", "user.email", "test@example.com")
    (path / "README.md").write_text("sample project\n")
    git(path, "add", "README.md")
    git(path, "commit", "-q", "-m", "initial commit")
    return path
