"""The diffstat an approver sees: what a node's branch changed since it forked."""

from __future__ import annotations

from pathlib import Path

from fractal.workspace.git import run_git


def shortstat(repo: Path, base: str, branch: str) -> str | None:
    """``git diff --shortstat base...branch`` (e.g. ``3 files changed, 40 insertions(+)``),
    ``no changes`` when empty, None when git cannot tell (a missing branch)."""
    proc = run_git(["diff", "--shortstat", f"{base}...{branch}"], repo, check=False)
    if proc.returncode != 0:
        return None
    return proc.stdout.strip() or "no changes"
