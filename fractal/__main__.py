"""``python -m fractal``: the same entry point as the ``fractal`` console script.

A node's pane runs ``python -P -m fractal node _run --path WORKTREE [--continue] [--resume]``,
the argv ``lifecycle/start/hosting.supervisor_argv`` writes. That exact form goes straight to the
supervisor, without click: parsing the CLI costs an import of click and the ``node``
command group, about a fifth of a short supervisor's CPU, for three fixed words. Any
other form (another option order, a repeated flag, a path that is not a directory) goes
through click as before (and so does every form inside a node's sandbox, where the
command goes to the node's relay), and an exception that escapes the supervisor's boot ends the
process as it would under click (``fractal.cli.settle``).

The pane's supervisor also runs its imports and boot with the garbage collector off:
what it builds then lives for the whole run, and ``runtime/heap.freeze_boot_heap``
collects once, freezes it and turns the collector back on.
"""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path


def pane_options(args: list[str]) -> tuple[Path, bool, bool] | None:
    """(worktree, continue_mode, resume_mode) when ``args`` is exactly the pane's
    ``node _run --path WORKTREE [--continue] [--resume]`` with WORKTREE a directory, else
    None (click parses it). Inside a node's sandbox (``FRACTAL_RELAY`` set) it is always
    None: there every command goes to the relay, which refuses this hidden verb."""
    if os.environ.get("FRACTAL_RELAY"):  # domain.sandbox.RELAY_ENV, without its import
        return None
    if len(args) < 4 or args[:3] != ["node", "_run", "--path"] or not os.path.isdir(args[3]):
        return None
    flags = args[4:]
    if flags not in ([], ["--continue"], ["--resume"], ["--continue", "--resume"]):
        return None
    return Path(args[3]), "--continue" in flags, "--resume" in flags


def _run_pane(worktree: Path, continue_mode: bool, resume_mode: bool) -> None:
    gc.disable()  # freeze_boot_heap turns it back on
    try:
        # deferred: start-up cost (213 modules)
        from fractal.runtime.entry import exit_now, run_supervisor

        code = run_supervisor(worktree, continue_mode=continue_mode, resume_mode=resume_mode)
    except (Exception, KeyboardInterrupt) as exc:
        gc.enable()
        from fractal.cli import settle  # deferred: start-up cost (41 modules)
        from fractal.crashlog import CrashSite  # deferred: start-up cost (17 modules)

        settle(exc, CrashSite(argv=sys.argv[1:]))
    exit_now(code)


def _main() -> None:
    pane = pane_options(sys.argv[1:])
    if pane is not None:
        _run_pane(*pane)
    from fractal.cli import main  # deferred: start-up cost (41 modules)

    main()


if __name__ == "__main__":
    _main()
