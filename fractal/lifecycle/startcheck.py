"""What ``fractal node start`` points out before a run: problems the loop would only
meet later (and report in the pane), said once in the shell where the user is looking.

Warnings only: the loop re-reads the step files and NODE.md at every iteration, so the
user may still fix them while the node runs.
"""

from __future__ import annotations

from fractal.domain.errors import StepFileError
from fractal.domain.frontmatter import frontmatter_warnings
from fractal.domain.steps import discover_steps
from fractal.tree import NodePaths

__all__ = ["TEMPLATE_MARK", "start_warnings"]

TEMPLATE_MARK = "<!-- Replace this comment with the task"
"""A line of the packaged NODE.md that a written task no longer has."""

_CRASH_LOOP = 3  # runtime.runloop.CRASH_LOOP: failed discoveries in a row that end a run


def start_warnings(paths: NodePaths) -> list[str]:
    """Sentences about ``paths``' step files and NODE.md as they are now (never raises):
    a broken file-name contract, frontmatter mistakes, an unwritten task."""
    out: list[str] = []
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
        try:
            text = (paths.steps_dir / step.filename).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue  # the loop names an unreadable file itself
        out += [f"steps/{step.filename}: {w}" for w in frontmatter_warnings(text)]
    try:
        task = paths.node_md.read_text(encoding="utf-8", errors="replace")
    except OSError:
        task = ""
    if TEMPLATE_MARK in task:
        out.append(f"{paths.node_md} still holds the template's placeholder for the task; "
                   "the agent gets it as written")
    return out
