"""What the CLI does with an exception nobody expected: save the traceback, say where.

A refusal (``FractalError``) is the user's to fix and prints ``Error: ...`` (exit 1). Any
other exception is fractal's fault: its traceback goes to a crash log
(``fractal.crashlog``, which says where) and stderr gets one line naming the file (exit 3).
"""

from __future__ import annotations

import sys

from fractal.crashlog import CrashSite, crash_line, one_line, save_crash

__all__ = ["CRASH_EXIT", "report_crash"]

CRASH_EXIT = 3


def report_crash(exc: BaseException, site: CrashSite) -> int:
    """Save ``exc``'s traceback and print one line about it on stderr; return CRASH_EXIT.

    When no crash log can be written anywhere, the line says so and the traceback follows
    it on stderr instead (it must not be lost).
    """
    import traceback  # deferred: start-up cost (2 modules)

    problems: list[str] = []
    path = save_crash(exc, site, problems)
    if path is not None:
        sys.stderr.write(f"{crash_line(exc, path)}\n")
        return CRASH_EXIT
    sys.stderr.write(f"Internal error ({one_line(exc)}); no crash log could be written "
                     f"({'; '.join(problems)}), so the traceback follows\n")
    traceback.print_exception(exc, file=sys.stderr)
    return CRASH_EXIT
