"""A throwaway PostgreSQL cluster for the suite's PostgreSQL backend (``--backend``).

``Cluster.start(base)`` runs ``initdb`` in the fresh directory ``base`` and starts
the server on a Unix socket there (no TCP: ``listen_addresses=''``), ``fsync=off``
since nothing of it outlives the session. initdb refuses root, so as root both run as
the ``postgres`` user (``runuser``) on a directory handed to it. ``template()`` builds
one database migrated to head; ``database(name)`` copies it (``CREATE DATABASE ...
TEMPLATE``, a file copy: milliseconds where a migration takes a second) and returns its
URL. ``stop()`` stops the server and removes the directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import NamedTuple

TEMPLATE = "fractal_template"


def _bin_dir() -> Path | None:
    """The directory of the newest installed server's binaries, or None."""
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"),
                      key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit()
                      else 0)
    return versions[-1].parent if versions else None


def available() -> str | None:
    """None when a cluster can be started here, else why not (a skip's reason)."""
    if _bin_dir() is None:
        return "no PostgreSQL server installed (scripts/bootstrap.sh installs `postgresql`)"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "the psycopg driver is not installed (make bootstrap installs fractal[postgres])"
    return None


def _run(argv: list[str]) -> None:
    """Run ``argv``; RuntimeError with its output when it fails."""
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{argv[0] if argv[0] != 'runuser' else argv[4]} failed "
                           f"({done.returncode}): {done.stderr.strip() or done.stdout.strip()}")


class Cluster(NamedTuple):
    """A running server: its data and socket directory, the user the suite connects as."""

    directory: Path
    user: str

    @property
    def socket_dir(self) -> Path:
        return self.directory / "socket"

    def url(self, database: str) -> str:
        """The libpq URL of ``database`` on this server (socket, no password)."""
        return f"postgresql://{self.user}@/{database}?host={self.socket_dir}"

    @classmethod
    def start(cls, base: Path) -> Cluster:
        """initdb and start a server in the empty directory ``base`` (``stop`` removes it);
        raises RuntimeError with the tool's output on failure."""
        bin_dir = _bin_dir()
        assert bin_dir is not None, available()
        directory = base  # removed whole by stop()
        data, sock = directory / "data", directory / "socket"
        sock.mkdir(parents=True)
        as_user: list[str] = []
        user = "postgres"
        if os.geteuid() == 0:
            shutil.chown(directory, "postgres")
            shutil.chown(sock, "postgres")
            as_user = ["runuser", "-u", "postgres", "--"]
        else:
            import getpass

            user = getpass.getuser()
        _run([*as_user, str(bin_dir / "initdb"), "-D", str(data), "-U", user,
              "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C"])
        options = (f"-c listen_addresses='' -c unix_socket_directories={sock} -c fsync=off "
                   "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200 "
                   "-c shared_buffers=32MB")
        _run([*as_user, str(bin_dir / "pg_ctl"), "-D", str(data), "-w", "-s",
              "-l", str(directory / "server.log"), "-o", options, "start"])
        return cls(directory, user)

    def admin(self, sql: str) -> None:
        """Run ``sql`` on the ``postgres`` database outside a transaction."""
        import psycopg

        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(sql)

    def template(self) -> None:
        """Create the template database and migrate it to head (fractal's own Alembic)."""
        from fractal.store import pgschema

        self.admin(f"CREATE DATABASE {TEMPLATE}")
        pgschema.ensure_schema(self.url(TEMPLATE))
        from fractal.store import pgdriver

        pgdriver.close_connections()

    def database(self, name: str) -> str:
        """A new database ``name`` copied from the template; its URL."""
        self.admin(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
        return self.url(name)

    def drop(self, name: str) -> None:
        """Drop database ``name``, ending any session still on it."""
        self.admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def stop(self) -> None:
        """Stop the server (immediately: nothing of it is kept) and remove its files."""
        bin_dir = _bin_dir()
        as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*as_user, str(bin_dir / "pg_ctl"), "-D", str(self.directory / "data"),
                        "-m", "immediate", "-s", "-w", "stop"], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(self.directory, ignore_errors=True)
