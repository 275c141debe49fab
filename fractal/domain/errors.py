"""The root of fractal's user-facing error family.

It lives in ``domain`` so pure modules can raise it without importing effect code;
``fractal.errors`` re-exports it and adds the effect-level subclasses.
"""

from __future__ import annotations


class FractalError(Exception):
    """A refusal or failure the user can act on.

    The message says what is wrong and, where there is one, the next step. The CLI
    prints ``Error: <message>`` and exits with ``exit_code`` (1: refused).
    """

    exit_code: int = 1


class InvalidValue(FractalError):
    """A value (a duration, a config key, a frontmatter field) broke a rule."""


class ConfigError(FractalError):
    """A node configuration is invalid. ``problems`` holds every broken rule, one per line."""

    def __init__(self, problems: list[str], source: str | None = None) -> None:
        self.problems = list(problems)
        self.source = source
        where = f" in {source}" if source else ""
        super().__init__(f"invalid configuration{where}:\n  " + "\n  ".join(self.problems))


class StepFileError(FractalError):
    """The steps directory broke the filename contract: at least one
    ``*.md`` file, every one named ``<digits>-<NAME>.md``, all digit prefixes one width.

    ``reason`` is the recorded vocabulary (``no step files`` or ``invalid step files``);
    ``detail`` names the offending files.
    """

    def __init__(self, reason: str, detail: str = "") -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}" if detail else reason)
