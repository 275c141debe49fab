"""Fixtures shared by the integration modules that start process groups themselves."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fractal.procs import processes
from fractal.procs.processes import Launched


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
