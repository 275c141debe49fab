"""``fractal plan``: create and list the plan files of the caller's node (its
``PLANS_DIR``, ``<node_dir>/plans/``; naming rules in ``domain.plans``).

The node is the acting one (inside a loop, the loop's node). The iteration reference
defaults to ``ITER_REF`` as the loop exports it, else the node's latest iteration, else
``0.0``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from fractal.domain.errors import FractalError
from fractal.domain.plans import (
    NO_ITERATION,
    check_iter_ref,
    check_slug,
    default_title,
    parse_plan_name,
    plan_filename,
    plan_text,
)
from fractal.lifecycle.context import Context
from fractal.tree import NodePaths

__all__ = ["list_plans", "new_plan"]


def _node(ctx: Context) -> NodePaths:
    return ctx.tree.node(ctx.acting)


def _iter_ref(paths: NodePaths, given: str | None, env: Mapping[str, str]) -> str:
    if given:
        return check_iter_ref(given)
    loop_ref = env.get("ITER_REF", "").strip()
    if loop_ref and env.get("NODE_BRANCH", paths.branch) in ("", paths.branch):
        return check_iter_ref(loop_ref)
    from fractal.lifecycle.commit import resolve_lineage

    lineage = resolve_lineage(paths.tree, paths.branch, {})
    if lineage.run_id is None:
        return NO_ITERATION
    return f"{lineage.run_id}.{lineage.iteration or 0}"


def new_plan(ctx: Context, name: str, *, title: str | None = None, iter_ref: str | None = None,
             env: Mapping[str, str] | None = None, now: datetime | None = None) -> Path:
    """Create ``<plans_dir>/<stamp>-<run.iter>-<name>.md`` holding ``# <title>`` (default:
    the name's words) and return its absolute path. Raises InvalidValue (a bad name,
    title or reference) and FractalError when that file exists already."""
    paths = _node(ctx)
    slug = check_slug(name)
    text = plan_text(title if title is not None else default_title(slug))
    ref = _iter_ref(paths, iter_ref, os.environ if env is None else env)
    path = paths.plans_dir / plan_filename(now or datetime.now(UTC), ref, slug)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with path.open("x", encoding="utf-8") as handle:
            handle.write(text)
    except FileExistsError:
        raise FractalError(f"plan {path} exists already; give another --name or wait a "
                           "second") from None
    return path.resolve()


_TITLE_READ = 4096  # characters of a plan read for its title


def _title(path: Path) -> str:
    try:
        with path.open(encoding="utf-8", errors="replace") as handle:
            head = handle.read(_TITLE_READ)  # a plan's title is its first line: no more
        for line in head.splitlines():
            if line.strip():
                return line.strip().lstrip("#").strip()
    except OSError:
        pass
    return ""


def list_plans(ctx: Context, *, iter_ref: str | None = None) -> list[dict[str, object]]:
    """The node's plans, oldest first: ``created`` (the stamp), ``iter_ref``, ``slug``,
    ``title`` (the first line, H1 marks dropped) and ``path``; only ``iter_ref``'s when
    given. Files that are not named like plans are left out."""
    paths = _node(ctx)
    wanted = check_iter_ref(iter_ref) if iter_ref else None
    rows: list[dict[str, object]] = []
    if not paths.plans_dir.is_dir():
        return rows
    for path in sorted(paths.plans_dir.iterdir()):
        name = parse_plan_name(path.name)
        if name is None or not path.is_file() or (wanted and name.iter_ref != wanted):
            continue
        rows.append({"created": name.stamp, "iter_ref": name.iter_ref, "slug": name.slug,
                     "title": _title(path), "path": str(path.resolve())})
    return rows
