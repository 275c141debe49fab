"""Seed the CHECK gate step into a node created with ``--exit-check`` (docs/checks.md).

The gate goes right before the REVIEW step, and the steps from REVIEW on move up one
number so the filename contract (one prefix width, sorted order) still holds: the seeds
``00-PREPARE .. 04-COMMIT`` become ``00-PREPARE, 01-PLAN, 02-EXECUTE, 03-CHECK,
04-REVIEW, 05-COMMIT``. Without a REVIEW step the gate goes last.
"""

from __future__ import annotations

import re
from pathlib import Path

from fractal.assets import asset_root
from fractal.errors import FractalError
from fractal.workspace.nodedir import write_atomic

__all__ = ["GATE_NAME", "gate_layout", "seed_check_gate"]

GATE_NAME = "CHECK"
_STEP = re.compile(r"(\d+)-(.+)\.md")
_PLACEHOLDER = "@EXIT_CHECK@"


def gate_layout(names: list[str], before: str = "REVIEW") -> tuple[list[tuple[str, str]], str]:
    """Where the gate goes among the step file ``names``: (renames as (old, new) pairs,
    highest number first so none collides, the gate's file name).

    The gate takes the number of the step named ``before`` and it and every later step
    move up one, keeping the common prefix width (2 when there are no steps). Names that
    do not follow the contract are left alone.
    """
    steps = sorted((int(m.group(1)), m.group(1), name) for name in names
                   if (m := _STEP.fullmatch(name)))
    width = len(steps[0][1]) if steps else 2
    anchor = next((num for num, _, name in steps if name.endswith(f"-{before}.md")), None)
    if anchor is None:
        number = steps[-1][0] + 1 if steps else 0
        return [], f"{number:0{width}d}-{GATE_NAME}.md"
    renames = [(name, f"{num + 1:0{width}d}-{name.split('-', 1)[1]}")
               for num, _, name in reversed(steps) if num >= anchor]
    return renames, f"{anchor:0{width}d}-{GATE_NAME}.md"


def seed_check_gate(node_dir: Path, command: str) -> Path:
    """Write the CHECK gate for ``command`` into ``<node_dir>/steps`` and renumber the steps
    after it; return the gate's path.

    Raises FractalError when ``command`` spans several lines (frontmatter holds one line)
    or a renamed step would overwrite an existing file. OSError on I/O errors.
    """
    if "\n" in command or "\r" in command:
        raise FractalError("exit_check must be a single line to seed the CHECK gate; "
                           "put a longer check in a script and call it")
    steps = node_dir / "steps"
    steps.mkdir(parents=True, exist_ok=True)
    renames, gate = gate_layout(sorted(p.name for p in steps.iterdir() if p.is_file()))
    for old, new in renames:
        if (steps / new).exists():
            raise FractalError(f"cannot renumber {old}: {new} already exists in {steps}")
        (steps / old).rename(steps / new)
    text = (asset_root() / "gates" / f"{GATE_NAME}.md").read_text(encoding="utf-8")
    write_atomic(steps / gate, text.replace(_PLACEHOLDER, command.strip()))
    return steps / gate
