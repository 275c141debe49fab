"""A radio post over the body cap is refused through the verb, before anything is
stored (real git, real SQLite)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fractal.domain.errors import InvalidValue
from fractal.domain.radio import CHANNELS, MAX_BODY_BYTES
from fractal.lifecycle import radio
from fractal.lifecycle.context import open_context
from fractal.lifecycle.trees import init_tree
from fractal.store import radio_reads
from fractal.store.engine import close_engines
from fractal.store.radio_reads import ReadState
from tests.helpers import make_repo


def test_a_radio_post_over_the_cap_is_refused_before_anything_is_stored(
        tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    init_tree(repo, agent="true")
    try:
        with pytest.raises(InvalidValue, match="over the radio's cap"):
            radio.post(open_context(repo), "x" * (MAX_BODY_BYTES + 1), node=None,
                       channel=None, subject="big", priority=5)
        radio.post(open_context(repo), "x" * MAX_BODY_BYTES, node=None, channel=None,
                   subject="at the cap", priority=5)
        db = repo / ".fractal" / "main" / "fractal.db"
        rows = radio_reads.listing(db, "main", hosts=None,
                                   channels=[str(getattr(c, "value", c)) for c in CHANNELS],
                                   state=ReadState.ALL)
        assert [m.subject for m in rows] == ["at the cap"]
    finally:
        close_engines()
