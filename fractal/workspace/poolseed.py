"""The step files of a worker pool: the pool node's own (DISPATCH, REVIEW) and the
template its workers get (``<pool node dir>/worker-steps/``, copied into each worker's
``steps/`` when the worker is created; edit it before the pool starts to change what
every worker does)."""

from __future__ import annotations

import shutil
from pathlib import Path

from fractal.assets import asset_root

__all__ = ["WORKER_STEPS", "copy_worker_steps", "seed_pool_steps"]

WORKER_STEPS = "worker-steps"
"""The directory of a pool node's data dir holding its workers' step files."""

_POOL_STEPS = ("00-DISPATCH.md", "01-REVIEW.md")
_WORKER_STEP = "00-WORK.md"


def _replace_steps(steps_dir: Path, sources: list[Path]) -> None:
    for old in steps_dir.glob("*.md"):
        old.unlink()
    steps_dir.mkdir(parents=True, exist_ok=True)
    for source in sources:
        shutil.copyfile(source, steps_dir / source.name)


def seed_pool_steps(node_dir: Path) -> None:
    """Make ``node_dir`` a pool node's: its ``steps/`` become DISPATCH and REVIEW, and
    ``worker-steps/`` holds the workers' one WORK step. Raises OSError."""
    pool = asset_root() / "pool"
    _replace_steps(node_dir / "steps", [pool / name for name in _POOL_STEPS])
    template = node_dir / WORKER_STEPS
    template.mkdir(parents=True, exist_ok=True)
    if not any(template.glob("*.md")):
        shutil.copyfile(pool / _WORKER_STEP, template / _WORKER_STEP)


def copy_worker_steps(pool_node_dir: Path, worker_node_dir: Path) -> bool:
    """Replace a new worker's ``steps/`` with the pool's ``worker-steps/*.md``; False (the
    worker keeps the seeded steps) when the pool has none. Raises OSError."""
    sources = sorted((pool_node_dir / WORKER_STEPS).glob("*.md"))
    if not sources:
        return False
    _replace_steps(worker_node_dir / "steps", sources)
    return True
