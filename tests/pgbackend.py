"""The suite's ledger backends: ``--backend=sqlite`` (the default), ``postgres`` or ``both``.

A test (or module, ``pytestmark``) marked ``backend`` runs once per chosen backend,
its id suffixed ``[sqlite]`` / ``[postgres]``; an unmarked test runs on SQLite alone
(each test that must stay so says why in its marker: ``pytest.mark.sqlite_only(why)``).
On PostgreSQL the test gets a database of its own copied from a migrated template
(``tests/pgcluster.py``), named to the whole process tree by ``FRACTAL_DATABASE_URL``,
so the CLI and every supervisor the test starts use it too; it is dropped afterwards.

One cluster serves the session: the controller (or the only process, without xdist)
starts it in ``pytest_configure`` and names it to the workers in ``PG_CLUSTER_ENV``, and
stops it in ``pytest_unconfigure``. With no PostgreSQL server or driver installed the
``[postgres]`` runs are skipped with the reason.
"""

from __future__ import annotations

import itertools
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.pgcluster import Cluster, available

PG_CLUSTER_ENV = "TESTS_PG_CLUSTER"
"""The running cluster's directory and user (``<dir>:<user>``), set by the controller."""

_started: Cluster | None = None
_names = itertools.count()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--backend", choices=("sqlite", "postgres", "both"), default="sqlite",
                     help="the ledger backend(s) tests marked `backend` run on")


def _chosen(config: pytest.Config) -> tuple[str, ...]:
    value = config.getoption("--backend")
    return ("sqlite", "postgres") if value == "both" else (value,)


def pytest_configure(config: pytest.Config) -> None:
    global _started
    config.addinivalue_line("markers", "backend: runs on every backend --backend chooses")
    config.addinivalue_line("markers", "sqlite_only(why): runs on SQLite alone, and says why")
    if (hasattr(config, "workerinput") or "postgres" not in _chosen(config)
            or config.option.collectonly):
        return
    if available() is not None or os.environ.get(PG_CLUSTER_ENV):
        return
    # Beside the suite's scratch, not in it: the server runs as the `postgres` user, who
    # must reach the directory (the scratch dir is private, 0700).
    shm = Path("/dev/shm")
    base = Path(tempfile.mkdtemp(prefix="fx-pg-", dir=shm if shm.is_dir() else None))
    base.chmod(0o711)
    _started = Cluster.start(base)
    _started.template()
    os.environ[PG_CLUSTER_ENV] = f"{_started.directory}:{_started.user}"


def pytest_unconfigure(config: pytest.Config) -> None:
    global _started
    if _started is not None:
        _started.stop()
        os.environ.pop(PG_CLUSTER_ENV, None)
        _started = None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.definition.get_closest_marker("backend") is None:
        return
    chosen = _chosen(metafunc.config)
    if metafunc.definition.get_closest_marker("sqlite_only") is not None:
        chosen = tuple(b for b in chosen if b == "sqlite")
        if not chosen:
            return  # runs as an unmarked test would, on SQLite
    metafunc.fixturenames.append("ledger_backend")
    metafunc.parametrize("ledger_backend", chosen, ids=list(chosen))


def _cluster() -> Cluster | None:
    named = os.environ.get(PG_CLUSTER_ENV)
    if not named:
        return None
    directory, _, user = named.rpartition(":")
    return Cluster(Path(directory), user)


@pytest.fixture(autouse=True)
def _ledger_backend(request: pytest.FixtureRequest) -> Iterator[None]:
    """A ``[postgres]`` test's own database, named by ``FRACTAL_DATABASE_URL`` until the
    test ends (set up before the test's other fixtures: autouse)."""
    callspec = getattr(request.node, "callspec", None)
    if callspec is None or callspec.params.get("ledger_backend") != "postgres":
        yield
        return
    why = available()
    cluster = _cluster()
    if why is not None or cluster is None:
        pytest.skip(why or "no PostgreSQL cluster started for this session")
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw")
    name = f"t_{worker}_{os.getpid()}_{next(_names)}"
    patch = pytest.MonkeyPatch()
    patch.setenv("FRACTAL_DATABASE_URL", cluster.database(name))
    try:
        yield
    finally:
        patch.undo()
        from fractal.store import db, pgdriver
        from tests import ledgersql

        ledgersql.close()
        db.close_connections()
        pgdriver.close_connections()
        cluster.drop(name)
