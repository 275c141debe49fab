"""Fixtures shared by integration modules: process groups a test starts itself, and the
tree of cousins (two nodes named ``x``) that the inbox, radio, merge and name tests read."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fractal.procs import processes
from fractal.procs.processes import Launched
from fractal.store.engine import close_engines
from tests.helpers import copy_of_tree
from tests.trees import build_cousins


@pytest.fixture
def spawned() -> Iterator[list[Launched]]:
    """Collects launches; at teardown each group is killed and reaped so no test leaks
    processes."""
    launches: list[Launched] = []
    yield launches
    for launched in launches:
        processes.kill_group(launched.handle, grace=0.5)
        launched.popen.wait(timeout=10)
        if launched.popen.stdout is not None:
            launched.popen.stdout.close()


@pytest.fixture
def cousins(tmp_path: Path) -> Iterator[Path]:
    """The repository of a tree ``main`` with ``main.a1``, ``main.a2`` and a child ``x``
    under each (``tests.trees.build_cousins``), made by the CLI once per test process and
    copied for each test."""
    yield copy_of_tree(tmp_path / "repo", "cousins-a1-a2-x", build_cousins)
    close_engines()
