"""The environment marker a launch carries, derivable from its step row.

Every process an agent starts inherits ``FRACTAL_LAUNCH_ID=<marker>``, so escaped
descendants can be found (and reaped) by the supervisor after the step or, after a
crash, by whoever heals the node — from the database alone.
"""

from __future__ import annotations

import hashlib


def launch_marker(db_path: str, step_id: int) -> str:
    """``<12 hex of sha1(db_path)>-<step_id>``: unique per tree database and step row."""
    digest = hashlib.sha1(db_path.encode("utf-8")).hexdigest()[:12]
    return f"{digest}-{step_id}"
