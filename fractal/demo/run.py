"""``fractal demo``: build the sample project, a tree and a node, run the node in tmux,
and follow it to the end (docs/getting-started.md, "The demo")."""

from __future__ import annotations

import re
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fractal.demo.project import (
    TASK,
    agent_wrapper,
    create_project,
    is_previous_demo,
    tests_pass,
)
from fractal.domain.states import SETTLED
from fractal.errors import FractalError
from fractal.store.backend import ledger_exists
from fractal.store.rows import ActivityRow

NODE = "fix_tests"
FOLLOW_TIMEOUT = 300.0  # seconds


@dataclass(frozen=True)
class DemoResult:
    """Where the demo ran and how it ended."""

    repo: Path
    branch: str
    status: str
    tests_pass: bool

    @property
    def ok(self) -> bool:
        return self.status == "completed" and self.tests_pass


def _clear_previous(target: Path) -> None:
    """Kill a previous demo's live sessions, then remove its directory."""
    from fractal import tmux  # deferred: start-up cost (1 module)
    from fractal.store import reader  # deferred: start-up cost (8 modules)
    from fractal.tree import trees_in  # deferred: start-up cost (1 module)

    for tree in trees_in(target):
        if not ledger_exists(tree.db_path):
            continue
        for row in reader.node_rows(tree.db_path):
            if row.tmux_session:
                socket = Path(row.tmux_socket) if row.tmux_socket else tmux.socket_path()
                tmux.kill_session(row.tmux_session, socket)
    shutil.rmtree(target)


def run_demo(target: Path, *, force: bool, echo: Callable[[str], None]) -> DemoResult:
    """Run the demo in ``target``. An existing ``target`` is refused, unless ``force``
    and it is empty or an earlier demo (``is_previous_demo``): --force never deletes a
    directory the demo did not make. Raises FractalError."""
    from fractal.lifecycle.context import Context  # deferred: start-up cost (4 modules)
    from fractal.lifecycle.spawn import init_node  # deferred: start-up cost (69 modules)
    from fractal.lifecycle.start.node import start_node  # deferred: start-up cost (59 modules)
    from fractal.lifecycle.trees import init_tree  # deferred: start-up cost (14 modules)
    from fractal.workspace.backstop import backstop_commit  # deferred: start-up cost (23 modules)

    target = target.resolve()
    if target.exists():
        if not force:
            raise FractalError(f"{target} exists; remove it or pass --force")
        if not (target.is_dir() and (is_previous_demo(target) or not any(target.iterdir()))):
            raise FractalError(f"{target} exists and is not an earlier demo, so --force will "
                               "not delete it; choose another directory or remove it yourself")
        _clear_previous(target)
    if re.search(r"\s", str(target)):
        raise FractalError(f"the demo directory path must not contain spaces: {target}")
    echo(f"demo: sample project with a failing test in {target}")
    create_project(target)
    tree = init_tree(target).tree
    wrapper = agent_wrapper(tree.data_dir)
    init_tree(target, agent=str(wrapper))
    operator = Context(tree=tree, cwd=target)  # the demo's own tree: its caller is its operator
    node = init_node(operator, NODE, {"title": "make the calc tests pass", "max_iters": 2,
                                    "step_timeout": "2m", "timeout": "10m"})
    node.paths.node_md.write_text(TASK)
    backstop_commit(node.paths.worktree, subject=f"{node.paths.branch}: task contract")
    echo(f"demo: node {node.paths.branch} ({node.paths.worktree}), 5 steps, max_iters 2")
    started = start_node(operator, NODE)
    echo(f"demo: supervisor running in tmux session {started.session} "
         f"(watch live: cd {target} && {_fractal_command()} node attach {NODE})")
    status = _follow(tree.db_path, node.paths.branch, echo)
    passed = tests_pass(node.paths.worktree)
    return DemoResult(repo=target, branch=node.paths.branch, status=status, tests_pass=passed)


def _fractal_command() -> str:
    """How to run fractal from another shell: the script beside this interpreter when it
    is not on PATH (``make demo`` does not put .venv/bin on PATH)."""

    local = Path(sys.executable).parent / "fractal"
    on_path = shutil.which("fractal")
    if on_path and Path(on_path).resolve() == local.resolve():
        return "fractal"
    return str(local) if local.exists() else "fractal"


def _follow(db_path: Path, branch: str, echo: Callable[[str], None]) -> str:
    """Print each new activity row until the node settles; return its final status."""
    from fractal.store import reader  # deferred: start-up cost (8 modules)

    seen: set[tuple[object, ...]] = set()
    deadline = time.monotonic() + FOLLOW_TIMEOUT
    settled = {s.value for s in SETTLED}
    while True:
        rows = reader.activity(db_path, [branch], None)
        for row in reversed(rows):
            key = (row.kind, row.event, row.run_id, row.iter_id, row.step_id, row.timestamp)
            if key in seen or row.kind == "event":
                continue
            seen.add(key)
            echo("  " + _describe(row))
        node = reader.node_row(db_path, branch)
        status = node.status if node else "unregistered"
        if status in settled:
            return status
        if time.monotonic() > deadline:
            raise FractalError(f"the demo node did not settle within {FOLLOW_TIMEOUT:.0f}s "
                               f"(status {status})")
        time.sleep(0.1)


def _describe(row: ActivityRow) -> str:
    ref = f"{row.run_id}" + (f".{row.iter}" if row.iter is not None else "")
    what = f"step {row.step} {row.step_name}" if row.kind == "step" else row.kind
    if row.event == "start":
        return f"{ref:<6} {what} started"
    took = f" in {row.duration:.1f}s" if row.duration is not None else ""
    return f"{ref:<6} {what} {row.status}{took}" + (f": {row.meta}" if row.meta else "")
