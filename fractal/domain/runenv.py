"""The environment a run keeps: which variables a refresh changed, and the notes that
say so (names only: a value, a key's above all, is never shown or recorded).

A node's run keeps the environment of the ``fractal node start`` that began it; every
relaunch (``node resume``, ``node start --continue``, ``fractal resume``, the dashboard's
keys) restores it instead of taking the calling shell's, unless ``--refresh-env`` replaces
it on purpose (docs/lifecycle.md, "The run's environment").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from fractal.domain.values import by_type

__all__ = ["EnvChange", "changed", "missing_note", "refresh_note"]


@by_type
class EnvChange(NamedTuple):
    """The names a refresh changed: ``added`` (only in the new environment), ``removed``
    (only in the kept one) and ``changed`` (in both, with another value); each sorted."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)


def changed(kept: Mapping[str, str], new: Mapping[str, str]) -> EnvChange:
    """What replacing ``kept`` by ``new`` changes, by name."""
    return EnvChange(added=tuple(sorted(k for k in new if k not in kept)),
                     removed=tuple(sorted(k for k in kept if k not in new)),
                     changed=tuple(sorted(k for k in new if k in kept and kept[k] != new[k])))


def refresh_note(branch: str, change: EnvChange) -> str:
    """The line a ``--refresh-env`` relaunch prints for ``branch``: the variables it
    changed, by name only (``changed PATH; added FOO; removed BAR``)."""
    if not change:
        return f"{branch}: environment refreshed from this shell; no variable changed"
    parts = [f"{what} {', '.join(names)}" for what, names in
             (("changed", change.changed), ("added", change.added),
              ("removed", change.removed)) if names]
    return f"{branch}: environment refreshed from this shell: {'; '.join(parts)}"


def missing_note(branch: str) -> str:
    """The line a relaunch prints when ``branch`` kept no environment (its run was started
    by a fractal that kept none, or the file was removed): this shell's is kept now."""
    return (f"{branch}: no environment was kept for this run (started by an older fractal, "
            "or its file was removed); it now keeps this shell's (`--refresh-env` replaces "
            "it later)")
