"""Longest tests first: the collected items are ordered by their recorded wall seconds.

A run on several workers ends when its last worker ends. Started in file order, a few long
end-to-end tests begin late and leave one worker busy while the others are done; started
longest first, the long ones overlap each other and the short ones fill the gaps at the
end. The recorded walls live in ``tests/durations.json``, a table this plugin only reads;
regenerate it from a timing run of the whole suite (``tests/timing.py``)::

    FRACTAL_TEST_TIMING=/tmp/t.jsonl make test
    python -m tests.timing --write-durations tests/durations.json /tmp/t.jsonl*

The order is a pure function of the collected items and the table, so every xdist worker
computes the same one (xdist refuses workers whose collections differ). A test the table
does not know gets the median of its module's known tests, else its tier's default
(``TIER_DEFAULTS``). Ties keep the collection order. Tests that share a module- or
class-scoped fixture stay together, as one block placed by its longest test, so each
worker builds that fixture once.

Longest-first only pays when a worker takes its next test when it is free: xdist's
default ``load`` scheduling hands each worker a quarter of its share up front, which would
give the first worker every long test. So unless the command line says otherwise, the
plugin sets ``--maxschedchunk 1``: each worker holds at most two tests ahead. (xdist's
``--dist worksteal`` is no better a partner: it also splits the list into one contiguous
share per worker up front, and steals by count of tests, not by their length.)

``FRACTAL_TEST_ORDER=file`` keeps pytest's own order (to reproduce a file-order run).
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path

import pytest

DURATIONS = Path(__file__).resolve().parent / "durations.json"
"""The committed table: ``{"tests": {node id: wall seconds}}``."""
ORDER_ENV = "FRACTAL_TEST_ORDER"
_ORDER = os.environ.get(ORDER_ENV, "")  # read at import: the session strips FRACTAL_* later

TIER_DEFAULTS = {"unit": 0.05, "integration": 0.5, "e2e": 5.0, "agents": 30.0, "soak": 30.0,
                 "security": 2.0}
"""Seconds assumed for a test of a module the table does not know, by tier."""
TOP_DEFAULT = 0.5
"""Seconds assumed for an unknown test directly under ``tests/``."""
_SHARED_SCOPES = ("module", "class", "package")


def load_table(path: Path = DURATIONS) -> dict[str, float]:
    """node id -> recorded wall seconds; empty when the file is missing or unreadable
    (not JSON, nested past the parser's depth, not the table's shape). An entry whose
    wall is not a finite number of seconds >= 0 (``NaN``, ``Infinity``, ``-1``) is left
    out: it would make the order's sort keys incomparable."""
    try:
        data = json.loads(path.read_text())
        table = {str(k): float(v) for k, v in data["tests"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return {}
    return {k: v for k, v in table.items() if math.isfinite(v) and v >= 0}


def module_of(nodeid: str) -> str:
    """``tests/e2e/test_x.py`` of ``tests/e2e/test_x.py::test_y[a]``."""
    return nodeid.split("::", 1)[0]


def tier_default(nodeid: str) -> float:
    """The default wall of an unknown test: by the directory under ``tests/``."""
    parts = module_of(nodeid).split("/")
    return TIER_DEFAULTS.get(parts[1], TOP_DEFAULT) if len(parts) > 2 else TOP_DEFAULT


def estimates(nodeids: list[str], table: Mapping[str, float]) -> list[float]:
    """The expected wall seconds of each test: its table entry, else the median of its
    module's entries, else its tier's default."""
    by_module: dict[str, list[float]] = defaultdict(list)
    for nodeid, wall in table.items():
        by_module[module_of(nodeid)].append(wall)
    medians = {m: statistics.median(walls) for m, walls in by_module.items()}
    out = []
    for nodeid in nodeids:
        known = table.get(nodeid)
        if known is None:
            known = medians.get(module_of(nodeid), tier_default(nodeid))
        out.append(known)
    return out


def longest_first(nodeids: list[str], groups: list[str | None],
                  table: Mapping[str, float]) -> list[int]:
    """Indexes into ``nodeids`` in run order: longest expected wall first, ties in
    collection order. Tests with the same non-None group form one block, placed by its
    longest test and ordered longest first inside."""
    walls = estimates(nodeids, table)
    block_wall: dict[str, float] = {}
    block_first: dict[str, int] = {}
    for i, group in enumerate(groups):
        if group is not None:
            block_wall[group] = max(block_wall.get(group, 0.0), walls[i])
            block_first.setdefault(group, i)

    def key(i: int) -> tuple[float, int, float, int]:
        group = groups[i]
        if group is None:
            return (-walls[i], i, 0.0, 0)
        return (-block_wall[group], block_first[group], -walls[i], i)

    return sorted(range(len(nodeids)), key=key)


def _shared_group(item: pytest.Item) -> str | None:
    """The module of a test that uses a module-, class- or package-scoped fixture."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    for defs in info.name2fixturedefs.values():
        if any(d.scope in _SHARED_SCOPES for d in defs):
            return module_of(item.nodeid)
    return None


def pytest_configure(config: pytest.Config) -> None:
    if _ORDER == "file":
        return
    if getattr(config.option, "maxschedchunk", "absent") is None:  # xdist present, unset
        config.option.maxschedchunk = 1


@pytest.hookimpl(trylast=True)  # after pytest's own reordering by fixture scope
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _ORDER == "file" or len(items) < 2:
        return
    order = longest_first([i.nodeid for i in items], [_shared_group(i) for i in items],
                          load_table())
    items[:] = [items[i] for i in order]
