"""What ``fractal node start`` points out before a run: problems the loop would only
meet later (and report in the pane), said once in the shell where the user is looking.

Warnings only: the loop re-reads the step files and NODE.md at every iteration, so the
user may still fix them while the node runs.
"""

from __future__ import annotations

from pathlib import Path

from fractal.domain.errors import StepFileError
from fractal.domain.steps.files import discover_steps
from fractal.domain.steps.frontmatter import frontmatter_warnings
from fractal.tree import NodePaths

__all__ = ["TEMPLATE_MARK", "start_warnings"]

TEMPLATE_MARK = "<!-- Replace this comment with the task"
"""A line of the packaged NODE.md that a written task no longer has."""

_CRASH_LOOP = 3  # runtime.runloop.CRASH_LOOP: failed discoveries in a row that end a run
_PER_FILE = 5  # warnings listed per step file
_READ_LIMIT = 1024 * 1024  # bytes of a step file or NODE.md looked at


def _read_small(path: Path) -> str | None:
    """The first _READ_LIMIT bytes of ``path`` as text, or None unless it is a regular
    file that can be read (a FIFO would block, /dev/zero would never end)."""
    try:
        if not path.is_file():
            return None
        with path.open("rb") as handle:
            return handle.read(_READ_LIMIT).decode("utf-8", errors="replace")
    except OSError:
        return None


def start_warnings(paths: NodePaths) -> list[str]:
    """Sentences about ``paths``' step files and NODE.md as they are now (never raises):
    a broken file-name contract, frontmatter mistakes, an unwritten task."""
    out: list[str] = []
    if not paths.steps_dir.is_dir():
        out.append(f"{paths.steps_dir} is not a directory; every iteration will fail until "
                   f"it holds the step files (the run ends after {_CRASH_LOOP} in a row)")
        steps = []
    else:
        try:
            entries = sorted(p for p in paths.steps_dir.iterdir() if p.is_file())
        except OSError:
            entries = []
        try:
            steps = discover_steps(p.name for p in entries)
        except StepFileError as exc:
            out.append(f"steps/ is not valid now: {exc}; the loop re-reads it every iteration "
                       f"and ends the run after {_CRASH_LOOP} failed ones in a row")
            steps = []
    for step in steps:
        text = _read_small(paths.steps_dir / step.filename)
        if text is None:
            continue  # the loop names an unreadable file itself
        found = frontmatter_warnings(text)
        out += [f"steps/{step.filename}: {w}" for w in found[:_PER_FILE]]
        if len(found) > _PER_FILE:
            out.append(f"steps/{step.filename}: ... and {len(found) - _PER_FILE} more")
    task = _read_small(paths.node_md) or ""
    if TEMPLATE_MARK in task:
        out.append(f"{paths.node_md} still holds the template's placeholder for the task; "
                   "the agent gets it as written")
    return out
