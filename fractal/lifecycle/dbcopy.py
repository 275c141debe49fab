"""``fractal db copy-to URL``: move a tree's ledger from its SQLite file to PostgreSQL.

The rule: the tree must be latched and quiet (the tree-wide brake on, no node
``active``), its ledger still the SQLite file, the URL a PostgreSQL one without a
password. The store copies every row with its ids into the empty target
(``store.copyto.copy_ledger``: migrated to head first, sequences advanced, counts
checked); only then does the root's config.json get the ``database`` key, as ``fractal
init --database`` writes it, and the brake moves with the ledger (the ``.paused`` file's
reason becomes the ``latches`` row), so the tree stays braked until ``fractal resume``.
The SQLite file stays exactly as it was, as a backup.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fractal.control import latch_path, latched, set_latch
from fractal.domain.states import Status
from fractal.errors import FractalError
from fractal.lifecycle.context import Context
from fractal.store import backend

__all__ = ["Copied", "copy_to"]


@dataclass(frozen=True)
class Copied:
    """What ``copy_to`` did: the stored URL (no password), each table with its row count
    in copy order, and the SQLite file kept as the backup."""

    url: str
    tables: tuple[tuple[str, int], ...]
    backup: Path


def copy_to(ctx: Context, url: str) -> Copied:
    """Copy the tree's SQLite ledger into the PostgreSQL database at ``url`` and point the
    tree at it. Raises FractalError (what to do next included) when run inside a node's
    loop, when the ledger is already PostgreSQL, when the brake is off or a node is
    active, for a URL that is not PostgreSQL or holds a password; StoreError when the
    target is unreachable, already holds rows, or the copy fails (nothing changes then)."""
    tree = ctx.tree
    if ctx.loop_node is not None:
        raise FractalError(f"`fractal db copy-to` moves the whole tree's ledger; node "
                           f"{ctx.loop_node} may not; run it as the operator, outside any loop")
    backend.check_url(url)
    if backend.without_password(url) != url:
        raise FractalError("the database URL holds a password, which fractal would write to "
                           "the tree's config.json; leave it out of the URL and put it in "
                           "~/.pgpass (or PGPASSWORD), then run `fractal db copy-to` again")
    current = backend.database_url(tree.db_path)
    if current is not None:
        raise FractalError(f"the tree's ledger is already on PostgreSQL "
                           f"({backend.without_password(current)}); there is no SQLite file "
                           f"to copy (unset {backend.URL_ENV} if it names another database)")
    if not tree.db_path.is_file():
        raise FractalError(f"the tree has no ledger file at {tree.db_path}; nothing to copy")
    if not latched(tree):
        raise FractalError("the tree is running: the ledger is copied only while the tree "
                           "is braked; run `fractal pause` (and let the nodes park), then "
                           "`fractal db copy-to` again")
    from fractal.store.registry import Registry  # deferred: start-up cost (SQLAlchemy seam)

    busy = [row.node for row in Registry(tree.db_path).nodes() if row.status == Status.ACTIVE]
    if busy:
        raise FractalError(f"node(s) {', '.join(busy)} still active; wait until `fractal node "
                           "list` shows none active under the brake (or stop them with "
                           "`fractal node stop`), then run `fractal db copy-to` again")
    from fractal.store.copyto import copy_ledger  # deferred: start-up cost (SQLAlchemy)
    from fractal.workspace.nodedir import update_config  # deferred: only this verb writes it

    try:
        reason = latch_path(tree).read_text(encoding="utf-8").strip()
    except OSError:
        reason = ""
    copied = copy_ledger(tree.db_path, url)
    update_config(tree.config_path, {backend.CONFIG_KEY: url})
    backend.forget()  # the config names the ledger's database now
    set_latch(tree, reason)  # the brake carries over: on PostgreSQL it is a latches row
    return Copied(url=url, tables=tuple(copied), backup=tree.db_path)
