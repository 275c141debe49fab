"""The demo's sample project: a tiny Python package with a real bug and a failing test."""

from __future__ import annotations

import sys
from pathlib import Path

from fractal.procs.commands import run_capture
from fractal.workspace.git import run_git

FILES: dict[str, str] = {
    "README.md": "# calc\n\nA tiny statistics package used by the fractal demo.\n",
    "calc/__init__.py": '"""Tiny statistics helpers."""\n\nfrom calc.stats import mean, total\n\n'
                        '__all__ = ["mean", "total"]\n',
    "calc/stats.py": (
        '"""Summary statistics over sequences of numbers."""\n\n\n'
        "def total(values: list[float]) -> float:\n"
        '    """The sum of ``values``."""\n'
        "    result = 0.0\n"
        "    for value in values:\n"
        "        result += value\n"
        "    return result\n\n\n"
        "def mean(values: list[float]) -> float:\n"
        '    """The arithmetic mean of a non-empty sequence."""\n'
        "    total = sum(values)\n"
        "    return total / (len(values) - 1)\n"
    ),
    "tests/__init__.py": "",
    "tests/test_stats.py": (
        "import unittest\n\nfrom calc import mean, total\n\n\n"
        "class StatsTest(unittest.TestCase):\n"
        "    def test_total(self) -> None:\n"
        "        self.assertEqual(total([1, 2, 3]), 6)\n\n"
        "    def test_mean(self) -> None:\n"
        "        self.assertEqual(mean([2, 4, 6]), 4)\n\n\n"
        'if __name__ == "__main__":\n    unittest.main()\n'
    ),
}

TASK = """# Task: make the calc test suite pass

## Context

- Branch: $CURRENT_BRANCH, worktree: $WORKTREE_DIR
- Iteration $ITER_LABEL ($ITER_REF), $STEP_LABEL
- Time budget: $TIME_BUDGET. Cost budget: $COST_BUDGET.

## Instructions

`python -m unittest discover -s tests` fails. Find the bug in the `calc` package and fix
it without changing the tests.

## Completion Requirements

- `python -m unittest discover -s tests` passes.
- The fix is committed on this node's branch.
"""


FIRST_COMMIT = "calc: a statistics package (with a bug)"


def _git(cwd: Path, *args: str) -> None:
    run_git(list(args), cwd)


def create_project(target: Path) -> None:
    """Write the sample project into ``target`` and commit it on branch ``main``."""
    target.mkdir(parents=True)
    for rel, text in FILES.items():
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    _git(target, "init", "-q", "-b", "main")
    _git(target, "config", "user.name", "fractal demo")
    _git(target, "config", "user.email", "demo@fractal.invalid")
    _git(target, "add", "-A")
    _git(target, "commit", "-q", "-m", FIRST_COMMIT)
    (target / DEMO_MARK).write_text("made by `fractal demo`; `--force` may replace it\n")


DEMO_MARK = ".git/fractal-demo"
"""A file inside the demo's git dir (never committed) that tells ``--force`` the
directory is a demo it made and may replace."""


def is_previous_demo(target: Path) -> bool:
    """Whether ``target`` is a directory an earlier ``fractal demo`` made: it carries
    DEMO_MARK, or (demos from before the mark) has the demo node's worktree, the tree's
    database and the sample project's first commit as the root of its history."""
    if (target / DEMO_MARK).is_file():
        return True
    if not ((target / ".worktrees" / "main.fix_tests").is_dir()
            and (target / ".fractal" / "main" / "fractal.db").is_file()):
        return False
    proc = run_git(["log", "--reverse", "--format=%s", "main"], target, check=False)
    first = proc.stdout.splitlines()[:1] if proc.returncode == 0 else []
    return first == [FIRST_COMMIT]


def tests_pass(worktree: Path) -> bool:
    """Run the sample project's tests in ``worktree``; True when they pass (exit 0)."""
    code, _ = run_capture([sys.executable, "-m", "unittest", "discover", "-s", "tests", "-q"],
                          cwd=worktree)
    return code == 0


def agent_wrapper(data_dir: Path) -> Path:
    """Write an executable that runs the demo agent with this interpreter; return its path."""
    wrapper = data_dir / "demo-agent"
    wrapper.write_text(f"#!/bin/sh\nexec '{sys.executable}' -P -m fractal.demo.agent \"$@\"\n")
    wrapper.chmod(0o755)
    return wrapper
