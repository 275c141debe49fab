"""The FractalError family: every user-facing refusal raised anywhere in fractal.

The CLI maps these to ``Error: <message>`` and exit code 1 (see ``fractal.cli``).
"""

from __future__ import annotations

from fractal.domain.errors import ConfigError, FractalError, InvalidValue, StepFileError

__all__ = [
    "ConfigError",
    "FractalError",
    "GitError",
    "InvalidValue",
    "NodeNotFound",
    "NotATree",
    "SpawnError",
    "StepFileError",
    "StoreError",
    "TmuxError",
]


class NotATree(FractalError):
    """No fractal tree was found from the working directory (run ``fractal init``)."""


class NodeNotFound(FractalError):
    """A node name did not resolve, or resolved to several candidates."""


class GitError(FractalError):
    """A git command failed; the message carries git's own stderr."""


class TmuxError(FractalError):
    """tmux refused an operation or is not installed."""


class StoreError(FractalError):
    """The central database could not be opened, migrated or written."""


class SpawnError(FractalError):
    """A process could not be started (binary missing, not executable).

    ``errno`` is the OS error number when there was one.
    """

    def __init__(self, message: str, errno: int | None = None) -> None:
        self.errno = errno
        super().__init__(message)
