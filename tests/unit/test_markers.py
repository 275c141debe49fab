"""The launch marker: a contract between the launcher, the kill and the healer."""

from __future__ import annotations

import hashlib

import pytest

from fractal.domain.agent.markers import launch_marker


@pytest.mark.parametrize(("db_path", "step_id"), [
    ("/tmp/t/.fractal/main/fractal.db", 1),
    ("/srv/ä/fractal.db", 42),
    ("", 0),
])
def test_the_marker_is_twelve_hex_of_the_sha1_of_the_database_path_and_the_step(
        db_path: str, step_id: int) -> None:
    digest = hashlib.sha1(db_path.encode("utf-8")).hexdigest()[:12]
    assert launch_marker(db_path, step_id) == f"{digest}-{step_id}"
