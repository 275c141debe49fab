"""``rescue restore --as`` keeps the rescued node's title, under its own name or another."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from fractal.lifecycle.cleanup.delete import delete
from fractal.lifecycle.context import open_context
from fractal.lifecycle.rescuing import restore_rescue
from fractal.lifecycle.spawn import init_node
from fractal.lifecycle.trees import init_tree
from fractal.store.engine import close_engines
from tests.helpers import make_repo


@pytest.fixture(autouse=True)
def _fresh_engines() -> Iterator[None]:
    yield
    close_engines()


@pytest.mark.parametrize("as_name", ["t", "again"])
def test_restore_as_keeps_the_title(tmp_path: Path, as_name: str) -> None:
    repo = make_repo(tmp_path / "repo")
    tree = init_tree(repo).tree
    init_node(open_context(repo), "t", {"title": "the tokenizer"})
    [done] = delete(open_context(repo), "t", force=True)
    assert done.rescue_ref is not None
    restored = restore_rescue(repo, done.rescue_ref, as_name=as_name)
    assert restored.node == f"main.{as_name}"
    with sqlite3.connect(tree.db_path) as db:
        title = db.execute("SELECT title FROM nodes WHERE node = ?",
                           (restored.node,)).fetchone()
    assert title == ("the tokenizer",)
