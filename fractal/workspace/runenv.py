"""The file a node's run keeps its environment in (``NodePaths.run_env_path``).

It lives in the node's private directory under the tree's data dir
(``<repo>/.fractal/<root>/private/<branch>/env.json``): outside every node's worktree, so
no agent's file search or ``git add`` meets it, and under a data dir that ignores itself,
so it is never committed. The directory is made 0700 and the file written 0600 (the
atomic write's temp file is born in that directory), since it holds the keys of the
shell that started the run. It is JSON, one object of names to values, and never
copied into the database.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from fractal.workspace.nodedir import write_atomic

__all__ = ["forget", "keep", "load"]


def keep(path: Path, env: Mapping[str, str]) -> None:
    """Write ``env`` as the run's kept environment at ``path`` (mode 0600, its directory
    0700, made when missing). Raises OSError when the directory cannot be written."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)  # an older or hand-made directory is closed too
    write_atomic(path, json.dumps(dict(env), sort_keys=True), mode=0o600)


def load(path: Path) -> dict[str, str] | None:
    """The kept environment at ``path``; None when there is none or it cannot be read
    (a torn or hand-edited file reads as none, never as a partial environment)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    return {str(k): str(v) for k, v in data.items()}


def forget(path: Path) -> None:
    """Remove the kept environment at ``path`` and its private directory (a deleted node
    leaves no keys behind); a missing one is no error."""
    import shutil  # only a node's removal needs it: kept off the start path

    path.unlink(missing_ok=True)
    shutil.rmtree(path.parent, ignore_errors=True)
