"""``node start`` failing at the take (the database locked just then) leaves nothing
behind: the tmux session it launched is ended, the kept environment it wrote removed, the
node still idle. The pane runs a stand-in (``sleep``) so the cleanup is what ends it."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from fractal import tmux
from fractal.errors import StoreError
from fractal.lifecycle import host as hostmod
from fractal.lifecycle import start as startmod
from fractal.lifecycle.context import open_context
from fractal.lifecycle.spawn import init_node
from fractal.lifecycle.start import start_node
from fractal.lifecycle.trees import init_tree
from fractal.store.engine import close_engines
from fractal.tree import NodePaths
from tests.helpers import make_repo, wait_until


@pytest.fixture(autouse=True)
def _fresh_engines() -> Iterator[None]:
    yield
    close_engines()


def test_a_start_refused_at_the_take_ends_its_session_and_launch_env(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = make_repo(tmp_path / "repo")
    init_tree(repo, agent="true")
    init_node(open_context(repo), "n", {"max_cost": 1.0})
    seen: list[tuple[str, Path, bool]] = []

    def stand_in(paths: NodePaths, **_flags: bool) -> list[str]:
        return ["sleep", "600"]

    def locked_take(paths: NodePaths, ledger: object, hosted: hostmod.Hosted,
                    move: object) -> bool:
        seen.append((hosted.session, hosted.socket, paths.run_env_path.exists()))
        raise StoreError("database is locked by another process; nothing was written; "
                         "try again once it lets go")

    monkeypatch.setattr(hostmod, "supervisor_argv", stand_in)
    monkeypatch.setattr(startmod, "take", locked_take)
    with pytest.raises(StoreError, match="locked"):
        start_node(open_context(repo), "n")
    ((session, socket, had_env),) = seen
    assert had_env  # the launch had happened when the take failed
    wait_until(lambda: tmux.probe(session, socket) is tmux.Liveness.GONE, timeout=30,
               message="the launched session ended")
    assert not (repo / ".fractal" / "main" / "private" / "main.n" / "env.json").exists()
    with sqlite3.connect(repo / ".fractal" / "main" / "fractal.db") as db:
        assert db.execute("SELECT status FROM nodes WHERE node = 'main.n'").fetchone() == \
            ("idle",)
