"""The environment marker a launch carries, derivable from its step row.

Every process an agent starts inherits ``FRACTAL_LAUNCH_ID=<marker>``, so escaped
descendants can be found (and reaped) by the supervisor after the step or, after a
crash, by whoever heals the node — from the database alone.
"""

from __future__ import annotations


def launch_marker(db_path: str, step_id: int) -> str:
    """``<12 hex of sha1(db_path)>-<step_id>``: unique per tree database and step row."""
    return f"{_sha1_hex(db_path.encode('utf-8'))[:12]}-{step_id}"


def _sha1_hex(data: bytes) -> str:
    """SHA-1 of ``data`` in hex, from CPython's built-in ``_sha1`` where there is one:
    ``hashlib`` loads OpenSSL's library when imported, several milliseconds that
    ``fractal node kill`` (which computes a marker per open step) would pay for this one
    digest. The digest is the same either way; ``hashlib`` is the fallback."""
    try:
        # deferred: start-up cost (1 module)
        from _sha1 import sha1  # type: ignore[import-not-found]  # no stub: CPython-internal
    except ImportError:
        from hashlib import sha1  # deferred: start-up cost (3 modules)
    return str(sha1(data).hexdigest())
