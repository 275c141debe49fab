"""Alembic environment for fractal's central database, driven from code (no ``alembic.ini``).

``fractal.store.schema`` passes an open SQLAlchemy connection in
``config.attributes["connection"]`` and owns its transaction; a developer running
``alembic`` by hand (top-level ``alembic.ini``) gets a one-shot engine from
``sqlalchemy.url`` instead, with the same WAL and BEGIN IMMEDIATE setup (a
``postgresql+psycopg://`` URL: a plain engine; ``store/pgschema.py`` migrates a tree's). Batch mode
is on because SQLite cannot ALTER most things in place. Autogenerate compares against ``fractal.store.models.Base.metadata``.
"""

from __future__ import annotations

from logging.config import fileConfig
from pathlib import Path

from alembic import context
from sqlalchemy import make_url
from sqlalchemy.engine import Connection

from fractal.store.connect import create_sqlite_engine
from fractal.store.models import Base

config = context.config
target_metadata = Base.metadata

if config.config_file_name is not None and config.attributes.get("connection") is None:
    fileConfig(config.config_file_name)


def run_offline() -> None:
    """Emit the migration SQL for ``sqlalchemy.url`` without connecting (``--sql``)."""
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        literal_binds=True,
        target_metadata=target_metadata,
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def _run_on(connection: Connection) -> None:
    """Run the pending migrations on ``connection`` (batch mode; compare types, defaults)."""
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        transactional_ddl=True,  # BEGIN IMMEDIATE covers DDL: a failed upgrade leaves nothing
        render_as_batch=True,
        compare_type=True,
        compare_server_default=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    """Migrate through the caller's connection, or a one-shot engine from the config."""
    connection = config.attributes.get("connection")
    if isinstance(connection, Connection):
        _run_on(connection)
        return
    url = config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("set sqlalchemy.url in alembic.ini, or pass a connection")
    if make_url(url).get_backend_name() == "postgresql":
        from sqlalchemy import create_engine
        from sqlalchemy.pool import NullPool

        engine = create_engine(url, poolclass=NullPool)
        try:
            with engine.begin() as conn:
                _run_on(conn)
        finally:
            engine.dispose()
        return
    database = make_url(url).database
    if not database:
        raise RuntimeError(f"sqlalchemy.url {url!r} names no SQLite file")
    Path(database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_sqlite_engine(Path(database), pooled=False)
    try:
        with engine.begin() as conn:
            _run_on(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
