"""The stand-in ``fractal`` command a supervisor writes when its interpreter has no
``fractal`` script beside it (a ``python -m fractal`` run from a source tree, say): a
two-line shell script in the node's ``tmp/bin/`` that runs this interpreter on this
package, so an agent always has an absolute path to the fractal its loop runs
(``FRACTAL_BIN``, docs/loop.md)."""

from __future__ import annotations

from pathlib import Path

from fractal.domain.prompt.variables import shell_word
from fractal.workspace.nodedir import write_atomic

__all__ = ["write_shim"]


def write_shim(path: Path, python: str, package_parent: str) -> Path:
    """Write ``path`` (mode 0755) running ``python -m fractal`` with ``package_parent``
    (the directory holding the ``fractal`` package) first on PYTHONPATH, and every
    argument passed on; returns ``path``. Raises OSError when it cannot be written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    script = ("#!/bin/sh\n"
              f"PYTHONPATH={shell_word(package_parent)}${{PYTHONPATH:+:$PYTHONPATH}}\n"
              "export PYTHONPATH\n"
              f"exec {shell_word(python)} -P -m fractal \"$@\"\n")
    write_atomic(path, script, mode=0o755)
    return path
