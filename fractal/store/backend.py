"""Which database holds a tree's ledger: its SQLite file, or a PostgreSQL database named
by one URL.

Every store call names the ledger by the tree's database path
(``<repo>/.fractal/<root>/fractal.db``); ``database_url(path)`` says whether a URL
replaces that file: ``FRACTAL_DATABASE_URL`` when set (it overrides, for every ledger the
process opens), else the ``database`` key of the tree's ``config.json`` beside the path
(written by ``fractal init --database URL`` and ``fractal db copy-to``), else None: the
SQLite file, exactly as before. Stdlib only: every verb asks it.

A URL is ``postgresql://`` or ``postgresql+psycopg://`` (libpq's form; the second is
SQLAlchemy's name for the same); a stored URL never holds a password
(``without_password``): libpq takes it from ``~/.pgpass`` or ``PGPASSWORD``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from fractal.domain.errors import InvalidValue

__all__ = ["CONFIG_KEY", "URL_ENV", "check_url", "database_url", "forget", "ledger_exists",
           "libpq_url", "this_host", "without_password"]

URL_ENV = "FRACTAL_DATABASE_URL"
"""The environment variable that names the ledger's PostgreSQL database (overrides config)."""

CONFIG_KEY = "database"
"""The key of the root data dir's ``config.json`` holding the ledger's URL."""

_SCHEMES = ("postgresql://", "postgresql+psycopg://", "postgres://")
_PASSWORD = re.compile(r"^([a-z+]+://[^:/@?]*):[^@/?]*@")

_configured: dict[Path, str | None] = {}  # a database path -> its tree config's URL


def check_url(url: str) -> str:
    """``url`` when it names a PostgreSQL database; else InvalidValue saying the forms."""
    if not url.startswith(_SCHEMES):
        raise InvalidValue(f"database URL {without_password(url)!r} is not a PostgreSQL URL; "
                           "use postgresql://USER@HOST/DATABASE (the password goes in "
                           "~/.pgpass or PGPASSWORD, never in the URL fractal stores)")
    return url


def without_password(url: str) -> str:
    """``url`` with any ``:password`` of its user part removed."""
    return _PASSWORD.sub(r"\1@", url)


def libpq_url(url: str) -> str:
    """``url`` as libpq takes it (SQLAlchemy's ``+psycopg`` driver name dropped)."""
    return "postgresql://" + url.split("://", 1)[1]


def database_url(db_path: Path) -> str | None:
    """The PostgreSQL URL holding the ledger named by ``db_path``, or None for the SQLite
    file itself: ``FRACTAL_DATABASE_URL`` first, then the tree config's ``database``
    (read once per path per process)."""
    env = os.environ.get(URL_ENV)
    if env:
        return env
    try:
        return _configured[db_path]
    except KeyError:
        pass
    url = _from_config(db_path.parent / "config.json")
    _configured[db_path] = url
    return url


def ledger_exists(db_path: Path) -> bool:
    """True when the tree's ledger is there to read: its SQLite file exists, or it is a
    PostgreSQL database (the server holds it; an unreachable one is refused on use)."""
    return database_url(db_path) is not None or db_path.is_file()


def this_host() -> str:
    """This machine's name as node rows record it (``nodes.host``, the machine owning a
    node's worktree and processes): the kernel's node name."""
    return os.uname().nodename


def forget() -> None:
    """Read every tree config again on next use (after ``db copy-to`` points one elsewhere)."""
    _configured.clear()


def _from_config(config: Path) -> str | None:
    try:
        text = config.read_text(encoding="utf-8")
    except OSError:
        return None
    if f'"{CONFIG_KEY}"' not in text:  # most trees: no JSON parse on the verb's path
        return None
    import json  # deferred: start-up cost (5 modules)

    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    url = data.get(CONFIG_KEY) if isinstance(data, dict) else None
    return url if isinstance(url, str) and url else None
