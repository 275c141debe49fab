"""The ``fractal`` command: a click root group whose subcommands load lazily.

Only the invoked subcommand's module is imported, so ``fractal --help`` and the read
commands never pay for the runtime, SQLAlchemy, alembic or watchdog.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import TYPE_CHECKING, Any, NoReturn

import click

from fractal import __version__

if TYPE_CHECKING:
    from fractal.crashlog import CrashSite

# name -> "module:attribute"; the module is imported only when the command runs.
_COMMANDS: dict[str, tuple[str, str]] = {
    "init": ("fractal.cli.tree", "init_cmd"),
    "commit": ("fractal.cli.commit", "commit_cmd"),
    "demo": ("fractal.cli.demo", "demo_cmd"),
    "node": ("fractal.cli.node", "node_group"),
    "pause": ("fractal.cli.tree", "pause_cmd"),
    "resume": ("fractal.cli.tree", "resume_cmd"),
    "radio": ("fractal.cli.radio", "radio_group"),
    "rescue": ("fractal.cli.rescue", "rescue_group"),
    "reset": ("fractal.cli.cleanup", "reset_cmd"),
    "destroy": ("fractal.cli.cleanup", "destroy_cmd"),
    "plan": ("fractal.cli.plan", "plan_group"),
    "pool": ("fractal.cli.pool", "pool_group"),
    "wiki": ("fractal.cli.wiki", "wiki_group"),
    "inbox": ("fractal.cli.inbox", "inbox_group"),
    "_notify": ("fractal.cli.inbox", "notify_cmd"),
    "usage": ("fractal.cli.usage", "usage_group"),
    "open": ("fractal.cli.open", "open_cmd"),
    "doctor": ("fractal.cli.doctor", "doctor_cmd"),
    "db": ("fractal.cli.db", "db_group"),
}
_SHORT_HELP: dict[str, str] = {
    "init": "Make the current branch the root (user node) of a tree.",
    "commit": "Commit the node's work: scope check, lint, scoped staging, push.",
    "demo": "Run the offline demo end to end in a sample repository.",
    "node": "Create, start, watch, steer and inspect nodes.",
    "pause": "Brake the whole tree: pause every node, block starts and spawns.",
    "resume": "Lift the tree-wide brake and resume parked nodes.",
    "rescue": "List and restore the rescue refs saved before destructive verbs.",
    "reset": "Remove every node of the tree (history and rescue refs stay).",
    "destroy": "Undo `fractal init` for the tree, database included.",
    "radio": "Message other nodes; read the loop's notices (run ends, gates, merges).",
    "plan": "Create and list the node's plan files.",
    "pool": "A worker pool's items, results and review (`fractal node pool` makes one).",
    "wiki": "Regenerate the project and memory wikis' indexes.",
    "inbox": "Everything in the tree that waits for a human, with the command to resolve it.",
    "open": "The live dashboard of the whole tree (Textual).",
    "usage": "List the usage windows; reopen one so its nodes probe now.",
    "doctor": "Check the tree's nodes, branches, worktrees and database.",
    "db": "The tree's ledger: copy it from SQLite into PostgreSQL.",
}


class LazyGroup(click.Group):
    """A click group that imports a subcommand's module only when it is invoked.

    ``lazy`` maps a command name to ``(module, attribute)``; ``short_help`` gives each
    lazy command's listing line, so ``--help`` lists the group without importing a
    subcommand. With ``clip`` the lines are shortened to the terminal as click shortens a
    loaded command's help (the text must be the command's first help sentence); without
    it they print whole.
    """

    def __init__(self, *args: Any, lazy: dict[str, tuple[str, str]], short_help: dict[str, str],
                 clip: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lazy = lazy
        self._short = short_help
        self._clip = clip

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self._lazy))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self._lazy:
            module_name, attr = self._lazy[cmd_name]
            command = getattr(importlib.import_module(module_name), attr)
            assert isinstance(command, click.Command)
            return command
        return super().get_command(ctx, cmd_name)

    def resolve_command(self, ctx: click.Context, args: list[str]
                        ) -> tuple[str | None, click.Command | None, list[str]]:
        """As click resolves a name, but an unknown one is answered with the close names
        among every command, the unloaded ones included (click looks only at loaded ones)."""
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError as exc:
            name = getattr(exc, "command_name", None)  # click >= 8.4 names the unknown one
            if name is None:
                raise
            raise click.exceptions.NoSuchCommand(name, possibilities=self.list_commands(ctx),
                                                 ctx=ctx) from None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        if not self._clip:
            rows = [(name, self._short.get(name, "")) for name in self.list_commands(ctx)
                    if not name.startswith("_")]  # hidden entry points
            if rows:
                with formatter.section("Commands"):
                    formatter.write_dl(rows)
            return
        listed: list[tuple[str, click.Command]] = []
        for name in self.list_commands(ctx):
            # A lazy command stands in as a bare command carrying its listing line.
            command = (click.Command(name, help=self._short[name]) if name in self._lazy
                       else super().get_command(ctx, name))
            if command is not None and not command.hidden:
                listed.append((name, command))
        if listed:
            limit = formatter.width - 6 - max(len(name) for name, _ in listed)
            with formatter.section("Commands"):
                formatter.write_dl([(name, command.get_short_help_str(limit))
                                    for name, command in listed])


@click.group(cls=LazyGroup, lazy=_COMMANDS, short_help=_SHORT_HELP,
             context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="fractal")
def cli() -> None:
    """Run autonomous coding-agent loops as a tree of nodes in one git repository."""


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: run the CLI and map errors to exit codes (``settle``).
    Inside a node's sandbox (``FRACTAL_RELAY`` set) the command is forwarded to the
    node's supervisor instead (``fractal.relayclient``)."""
    relay = os.environ.get("FRACTAL_RELAY")  # domain.sandbox.RELAY_ENV, without its import
    if relay:
        sys.exit(_forward(relay, list(sys.argv[1:] if argv is None else argv)))
    from fractal.crashlog import CrashSite  # deferred: start-up cost (9 modules)

    site = CrashSite(argv=list(sys.argv[1:] if argv is None else argv))
    if site.argv[:1] != ["open"] and _on_a_terminal():  # (the dashboard draws its own)
        # deferred: only here: piped output needs none (3 modules)
        from fractal.cli.safeout import guard_terminal

        guard_terminal()
    try:
        cli.main(args=argv, prog_name="fractal", standalone_mode=False, obj=site)
    except (Exception, KeyboardInterrupt) as exc:
        settle(exc, site)
    sys.exit(0)


def _forward(relay: str, argv: list[str]) -> int:
    """Run ``argv`` through the node's relay; print its answer; return its exit code."""
    from fractal.relayclient import forward  # deferred: start-up cost (7 modules)

    try:
        code, out, err = forward(relay, argv)
    except (OSError, ValueError) as exc:
        click.echo(f"Error: cannot reach this node's supervisor through {relay}: {exc}; "
                   "is its run still going?", err=True)
        return 1
    for stream, data in ((sys.stdout, out), (sys.stderr, err)):
        stream.write(data.decode("utf-8", errors="replace"))
        stream.flush()
    return code


def _on_a_terminal() -> bool:
    """Whether stdout or stderr is a terminal (what a node wrote is then made safe)."""
    try:
        return any(s is not None and s.isatty() for s in (sys.stdout, sys.stderr))
    except (OSError, ValueError):
        return False


def settle(exc: BaseException, site: CrashSite) -> NoReturn:
    """End the process the way a command that raised ``exc`` ends; call it from the
    ``except`` block that caught ``exc``.

    Exit codes: 1 a refusal (``FractalError``: ``Error: <message>`` on stderr, or an
    environment problem such as a full disk), 2 a usage error (click), 3 an internal error
    (any other exception: one line on stderr names the crash log holding the traceback,
    see ``fractal.cli.crash``), 130 Ctrl-C. A closed stdout pipe exits quietly (0).
    """
    from fractal.domain.errors import FractalError  # deferred: start-up cost (2 modules)

    if isinstance(exc, FractalError):
        click.echo(f"Error: {exc}", err=True)
        sys.exit(exc.exit_code)
    if isinstance(exc, click.exceptions.Abort):
        click.echo("Aborted.", err=True)
        sys.exit(130)
    if isinstance(exc, KeyboardInterrupt):
        sys.exit(130)
    if isinstance(exc, click.ClickException):
        exc.show()
        sys.exit(exc.exit_code)
    if isinstance(exc, click.exceptions.Exit):
        sys.exit(exc.exit_code)
    if isinstance(exc, BrokenPipeError):
        sys.stderr.close()
        sys.exit(0)
    if isinstance(exc, OSError):  # an environment problem (a path too long, a full disk)
        where = f": {exc.filename}" if exc.filename else ""
        click.echo(f"Error: {exc.strerror or exc}{where}", err=True)
        sys.exit(1)
    # fractal's own fault: keep the traceback, say where
    from fractal.cli.crash import report_crash  # deferred: start-up cost (10 modules)
    from fractal.crashlog import locate_tree  # deferred: start-up cost (9 modules)

    locate_tree(site)
    sys.exit(report_crash(exc, site))
