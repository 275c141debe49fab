"""``fractal node ...``: create, start, watch and inspect nodes."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from fractal.cli import LazyGroup
from fractal.cli.context import PATH_OPTION, path_option, verb_context
from fractal.cli.format import format_options, limit_option, notice, output_format, render_rows

# CLI flag -> config key, for the value-taking options of `node init`.
_INIT_VALUES: dict[str, str] = {
    "title": "title", "agent": "agent", "provider": "provider", "model": "model",
    "effort": "effort", "max_iters": "max_iters", "max_depth": "max_depth",
    "max_children": "max_children", "max_descendants": "max_descendants",
    "timeout": "timeout", "iter_timeout": "iter_timeout", "step_timeout": "step_timeout",
    "step_retries": "step_retries", "step_retry_backoff": "step_retry_backoff",
    "interval": "interval", "sleep": "sleep", "wait": "wait", "max_cost": "max_cost",
    "max_iter_cost": "max_iter_cost", "max_step_cost": "max_step_cost", "scope": "scope",
    "base": "base", "exit_check": "exit_check", "check_timeout": "check_timeout",
    "no_progress": "no_progress",
}
_INIT_FLAGS = ("sync", "detached", "local")


# name -> "module:attribute" of the subcommands defined outside this module; each module
# is imported only when its command runs (``node status`` never loads the merge verbs).
_LAZY: dict[str, tuple[str, str]] = {
    **{name: ("fractal.cli.steer", f"{name}_cmd")
       for name in ("stop", "finish", "pause", "resume", "kill", "approve", "pending",
                    "done")},
    "cost": ("fractal.cli.cost", "cost_group"),
    "config": ("fractal.cli.config", "config_group"),
    "update": ("fractal.cli.config", "update_cmd"),
    "checks": ("fractal.cli.checks", "checks_cmd"),
    "merge": ("fractal.cli.merge", "merge_cmd"),
    "diff": ("fractal.cli.merge", "diff_cmd"),
    "conflicts": ("fractal.cli.merge", "conflicts_cmd"),
    "retire": ("fractal.cli.cleanup", "retire_cmd"),
    "unretire": ("fractal.cli.cleanup", "unretire_cmd"),
    "delete": ("fractal.cli.cleanup", "delete_cmd"),
}
# Each lazy command's first help sentence, for the listing (a style test keeps them equal).
_LAZY_HELP: dict[str, str] = {
    "stop": "End NODE's run after its current step (descendants first).",
    "finish": "End NODE's run after its current iteration, once its children have finished.",
    "pause": "Abort NODE's in-flight agent and park its run (node first, then descendants).",
    "resume": "Relaunch NODE's parked run, and its paused descendants (deepest first).",
    "kill": "Kill NODE and its descendants now: loop, agent and pane; rows close ``killed``.",
    "approve": "Release NODE's step awaiting approval (its pending one, or STEP_ID).",
    "done": "End this node's own run, completed, after the current step (run it from the "
            "node's own step, once its work is done and its children's work merged).",
    "pending": "List gated steps awaiting approval: NODE's children's (every gate of the "
               "tree at the root; NODE's whole subtree with --all).",
    "cost": "Read the budget ledger: spend and remaining budget, children included.",
    "config": "Read or change the caller's config.json (typed and validated).",
    "update": "Retune NODE: write its config.json and registry row together; a running node "
              "picks the change up at its next iteration.",
    "checks": "Exit checks and gate steps NODE's loop ran, oldest first, then (in a table) "
              "the trend of failing counts per iteration.",
    "merge": "Squash-merge NODE's work into its target (its base, else its parent).",
    "diff": "What merging NODE would bring into its target now (node directories excluded).",
    "conflicts": "Whether NODE's children would conflict with its tip and with each other.",
    "retire": "Retire a settled NODE and its subtree: worktrees removed, branches and rows kept.",
    "unretire": "Bring a retired NODE (and its retired descendants) back with its worktree.",
    "delete": "Delete NODE and its subtree: worktrees, branches and registry rows "
              "(history stays).",
}


@click.group("node", cls=LazyGroup, lazy=_LAZY, short_help=_LAZY_HELP, clip=True)
def node_group() -> None:
    """Create, start, watch, steer and inspect nodes."""


def _init_options(func: Any) -> Any:
    specs = [
        ("--title", "A one-line title for the node."),
        ("--agent", "claude, codex, or a command (e.g. './my-agent --flag')."),
        ("--provider", "Provider route for the agent."),
        ("--model", "Model id passed to the agent."),
        ("--effort", "Reasoning effort passed to the agent."),
        ("--max-iters", "Iterations per run (default: unlimited)."),
        ("--max-depth", "Deepest level of descendants this node may spawn."),
        ("--max-children", "Direct children this node may have."),
        ("--max-descendants", "Descendants this node may have in all."),
        ("--timeout", "Run wall, e.g. 24h."),
        ("--iter-timeout", "Iteration wall, e.g. 1h."),
        ("--step-timeout", "Step ceiling, e.g. 10m."),
        ("--step-retries", "Extra attempts for a failed launch (default 1)."),
        ("--step-retry-backoff", "Delay before each retry (default 10s)."),
        ("--interval", "Fixed cadence between iteration starts, e.g. 30m."),
        ("--sleep", "Fixed gap between iterations, e.g. 5m."),
        ("--wait", "Wait window: how often a waiting loop looks for news to SYNC on (default 1m)."),
        ("--max-cost", "Run ceiling in USD (node plus descendants)."),
        ("--max-iter-cost", "Per-iteration cap in USD."),
        ("--max-step-cost", "Per-step cap in USD."),
        ("--reserve-budget", "Cleanup reserve: USD or N% of --max-cost (default 10%)."),
        ("--scope", "Comma-separated directories the node may change."),
        ("--base", "Fork from this branch instead of the parent's tip."),
        ("--exit-check", "Command run after every iteration; exit 0 completes the run "
                         "(seeds a 03-CHECK gate step). A red check that prints nothing "
                         "never counts as no progress: print why it fails."),
        ("--check-timeout", "Time limit of each check command (default 10m)."),
        ("--no-progress", "Red exit checks in a row failing the same way that end the run "
                          "(default 2; null disables)."),
    ]
    for flag, text in reversed(specs):
        func = click.option(flag, default=None, metavar="VALUE", help=text)(func)
    for name, text in (("sync", "Run SYNC before each step (default on)."),
                       ("detached", "A fresh agent invocation per step (default off)."),
                       ("local", "Never push (default off).")):
        func = click.option(f"--{name}/--no-{name}", default=None, help=text)(func)
    return func


def _settings(values: dict[str, Any]) -> dict[str, object]:
    """The config settings the ``node init`` options typed; raises ConfigError listing
    every bad value (and the cross-key rules the others break)."""
    # deferred: only this command needs it (14 modules)
    from fractal.domain.config import coerce_value, default_config, validate_config

    # deferred: only this command needs it (2 modules)
    from fractal.domain.errors import ConfigError, FractalError

    settings: dict[str, object] = {}
    problems: list[str] = []
    for option, key in _INIT_VALUES.items():
        text = values.get(option)
        if text is None:
            continue
        try:
            settings[key] = coerce_value(key, text)
        except FractalError as exc:
            problems.append(str(exc))
    for flag in _INIT_FLAGS:
        if values.get(flag) is not None:
            settings[flag] = bool(values[flag])
    if problems:  # report the cross-key rules too, for the values that did parse
        merged = {**default_config(), **settings}
        problems += [p for p in validate_config(merged) if p not in problems]
        raise ConfigError(problems)
    return settings


@node_group.command("pool")
@click.argument("name")
@click.option("--items", "items_file", required=True, metavar="FILE",
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The items: a JSON array, JSON lines or plain lines (id, input).")
@click.option("--brief", "brief_file", required=True, metavar="FILE",
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Every worker's instructions (its task gets the brief plus its item).")
@click.option("--max-workers", type=int, default=None, metavar="N",
              help="Workers at a time (default 4, clamped to 1..6).")
@_init_options
@PATH_OPTION
def pool_cmd(name: str, items_file: Path, brief_file: Path, max_workers: int | None,
             path: Path, **values: Any) -> None:
    """Create pool node NAME: one worker node per item, dispatched by fractal."""
    # deferred: only this command needs it (37 modules)
    from fractal.lifecycle.pool import create_pool

    texts = [_input_text(items_file, "--items"), _input_text(brief_file, "--brief")]
    worktree, branch, width, count = create_pool(
        verb_context(path), name, texts[0], texts[1], max_workers, _settings(values),
        reserve=values.get("reserve_budget"))
    click.echo(branch)
    click.echo(f"created pool {branch} at {worktree}: {count} items, {width} workers at a "
               f"time; start it with `fractal node start {name}`", err=True)


def _input_text(path: Path, option: str) -> str:
    """The text of the file an option names (``--task-file``, ``--items``, ``--brief``): a
    regular file of at most ``TASK_FILE_CAP`` bytes of UTF-8 (``/dev/zero``, a FIFO or a
    huge file is refused, never read on and on). Raises click.BadParameter saying why."""
    from fractal.domain.limits import TASK_FILE_CAP, over_cap  # deferred: start-up cost (1 module)
    from fractal.workspace.capped import read_capped  # deferred: start-up cost (1 module)

    try:
        data = read_capped(path, TASK_FILE_CAP)
        if len(data) > TASK_FILE_CAP:
            raise click.BadParameter(over_cap(str(path), TASK_FILE_CAP), param_hint=option)
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = "not a regular file" if isinstance(exc, OSError) and exc.errno == 22 else exc
        raise click.BadParameter(f"cannot read {path}: {why}; give a regular UTF-8 file",
                                 param_hint=option) from None


@node_group.command("init")
@click.argument("name")
@click.option("--parent", default=None, help="Parent node (default: the caller's node).")
@click.option("--task", default=None, metavar="TEXT", help="The task: NODE.md's Instructions.")
@click.option("--task-file", default=None, metavar="FILE",
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Read the task from FILE.")
@click.option("--gate", "gates", multiple=True, metavar="STEP",
              help="Make STEP (name, file or number) wait for approval; repeatable.")
@click.option("--inherit", default=None, metavar="SURFACES",
              help="Copy from the parent: steps,scripts,config or all (config: preferences, "
                   "never budgets).")
@_init_options
@PATH_OPTION
def init_cmd(name: str, parent: str | None, task: str | None, task_file: Path | None,
             gates: tuple[str, ...], inherit: str | None, path: Path, **values: Any) -> None:
    """Create node NAME: a branch, a worktree and a seeded data directory."""
    # deferred: only this command needs it (17 modules)
    from fractal.domain.nodeinit import parse_inherit

    # deferred: only this command needs it (95 modules)
    from fractal.lifecycle.spawn import NodeSeed, init_node

    if task is not None and task_file is not None:
        raise click.UsageError("--task and --task-file are mutually exclusive")
    if task_file is not None:
        task = _input_text(task_file, "--task-file")
    seed = NodeSeed(task=task, gates=gates, inherit=parse_inherit(inherit))
    settings = _settings(values)
    ctx = verb_context(path)
    result = init_node(ctx, name, settings, parent=parent,
                       reserve=values.get("reserve_budget"), seed=seed)
    for warning in result.warnings:
        click.echo(f"warning: {warning}", err=True)
    if all(settings.get(k) is None for k in ("max_cost", "max_iters", "exit_check")):
        click.echo("warning: none of --max-cost, --max-iters, --exit-check is set; the node "
                   "will run until stopped", err=True)
    click.echo(result.paths.branch)
    branch = result.paths.branch
    short = branch.removeprefix(ctx.tree.root + ".")  # the root's name is implied
    todo = (f"its task is in {result.paths.node_md}; start it with" if task is not None
            else f"write its task in {result.paths.node_md}, then")
    click.echo(f"created {branch} at {result.paths.worktree}; {todo} "
               f"`fractal node start {short}`", err=True)


@node_group.command("start")
@click.argument("node", required=False)
@click.option("--continue", "continue_mode", is_flag=True,
              help="Start a new run of a settled node (iterations restart at 1).")
@click.option("--clean", is_flag=True,
              help="With --continue: discard uncommitted project files instead of refusing.")
@click.option("--max-cost", default=None, metavar="USD",
              help="Arm this run's cost ceiling (required to continue after a budget end).")
@click.option("--tree", "whole_tree", is_flag=True,
              help="With --continue: also every settled descendant, shallowest first.")
@click.option("--refresh-env", is_flag=True,
              help="With --continue: use this shell's environment instead of the one the "
                   "last run started with (prints the names that changed).")
@PATH_OPTION
def start_cmd(node: str | None, continue_mode: bool, clean: bool, max_cost: str | None,
              whole_tree: bool, refresh_env: bool, path: Path) -> None:
    """Start NODE's supervisor in a detached tmux session."""
    # deferred: only this command needs it (85 modules)
    from fractal.lifecycle.start.node import start_node

    if clean and not continue_mode:
        raise click.UsageError("--clean only applies with --continue")
    if refresh_env and not continue_mode:
        raise click.UsageError("--refresh-env only applies with --continue (a fresh start "
                               "always keeps this shell's environment)")
    if whole_tree:
        if not continue_mode:
            raise click.UsageError("--tree only applies with --continue")
        # deferred: only this command needs it (86 modules)
        from fractal.lifecycle.start.subtree import start_tree

        done = start_tree(verb_context(path), node, clean=clean, max_cost=max_cost,
                          refresh_env=refresh_env)
        for each in done.started:
            click.echo(f"started {each.paths.branch} (run {each.run_id or 'booting'})",
                       err=True)
            if each.env_note:
                click.echo(each.env_note, err=True)
        for branch, why in done.refused:
            click.echo(f"warning: {branch} not started: {why}", err=True)
        return
    started = start_node(verb_context(path), node, continue_mode=continue_mode, clean=clean,
                         max_cost=max_cost, refresh_env=refresh_env)
    run = f"run {started.run_id}" if started.run_id else "booting"
    click.echo(f"started {started.paths.branch} ({run}) in tmux session {started.session}; "
               f"watch: fractal node attach {node or started.paths.branch}", err=True)
    if started.env_note:
        click.echo(started.env_note, err=True)
    for warning in started.warnings:
        click.echo(f"warning: {warning}", err=True)


@node_group.command("attach")
@click.argument("node", required=False)
@PATH_OPTION
def attach_cmd(node: str | None, path: Path) -> None:
    """Attach the terminal to NODE's live tmux pane (detach with C-b d)."""
    # deferred: only this command needs it (85 modules)
    from fractal.lifecycle.start.node import attach_node

    attach_node(verb_context(path), node)


@node_group.command("status")
@click.argument("node", required=False)
@PATH_OPTION
def status_cmd(node: str | None, path: Path) -> None:
    """Print NODE's lifecycle status, with the last run's reason when settled."""
    # deferred: only this command needs it (23 modules)
    from fractal.lifecycle.reads.nodes import node_status

    status = node_status(verb_context(path), node)
    click.echo(status.line)
    if status.unsandboxed:
        notice(f"{status.branch} runs unsandboxed: the tree's config says \"sandbox\": "
               "\"off\" (docs/security.md)")


@node_group.command("list")
@click.argument("node", required=False)
@click.option("--all", "show_all", is_flag=True, help="Include retired nodes.")
@click.option("--retired", "only_retired", is_flag=True, help="Only retired nodes.")
@click.option("--tree", "as_tree", is_flag=True,
              help="Draw the subtree with box-drawing lines and status marks.")
@click.option("--ascii", "as_ascii", is_flag=True,
              help="With --tree: plain ASCII (the default when stdout is not a terminal).")
@format_options
@PATH_OPTION
def list_cmd(node: str | None, show_all: bool, only_retired: bool, as_tree: bool,
             as_ascii: bool, as_json: bool, as_csv: bool, path: Path) -> None:
    """List NODE and its descendants (the whole tree from the root); retired ones hidden."""
    # deferred: only this command needs it (23 modules)
    from fractal.lifecycle.reads.nodes import list_nodes

    if show_all and only_retired:
        raise click.UsageError("--all and --retired are mutually exclusive")
    if as_tree and (as_json or as_csv):
        raise click.UsageError("--tree draws text; it excludes --json and --csv")
    rows = list_nodes(verb_context(path), node, show="all" if show_all else
                      "retired" if only_retired else "live")
    if as_tree:
        # deferred: only this command needs it (6 modules)
        from fractal.cli.treeview import render_tree

        click.echo(render_tree(rows, ascii_only=as_ascii or not sys.stdout.isatty()))
        return
    columns = ["node", "status", "detail", "title", "max_cost", "created"]
    click.echo(render_rows(rows, columns, fmt=output_format(as_json, as_csv)))


_ACTIVITY_COLUMNS = ["timestamp", "node", "kind", "event", "ref", "step", "status", "exit",
                     "duration", "cost", "reason"]
_ACTIVITY_JSON = [*_ACTIVITY_COLUMNS, "run_id", "iter_id", "step_id", "actor"]


@node_group.command("activity")
@click.argument("node", required=False)
@limit_option("rows")
@click.option("--follow", "-f", is_flag=True,
              help="Print the newest rows oldest first, then each new row as it lands, "
                   "until interrupted (Ctrl-C).")
@format_options
@PATH_OPTION
def activity_cmd(node: str | None, limit: int | None, follow: bool, as_json: bool,
                 as_csv: bool, path: Path) -> None:
    """Run, iteration and step rows (start and end), newest first."""
    # deferred: only this command needs it (23 modules)
    from fractal.lifecycle.reads.nodes import activity

    fmt = output_format(as_json, as_csv)
    if follow:
        # deferred: only this command needs it (3 modules)
        from fractal.cli.streams import stream_activity

        stream_activity(path, node, limit, fmt, _ACTIVITY_JSON if fmt == "json"
                        else _ACTIVITY_COLUMNS)
        return
    rows = activity(verb_context(path), node, limit)
    if fmt is None and sys.stdout.isatty():  # the table: an early failure's repeats once
        # deferred: only this command needs it (3 modules)
        from fractal.domain.views.activity import collapse_repeats

        rows = collapse_repeats(rows)
    click.echo(render_rows(rows, _ACTIVITY_JSON if fmt == "json" else _ACTIVITY_COLUMNS,
                           fmt=fmt))


@node_group.command("_run", hidden=True)
@path_option(None, required=True)
@click.option("--continue", "continue_mode", is_flag=True)
@click.option("--resume", "resume_mode", is_flag=True)
def run_cmd(path: Path, continue_mode: bool, resume_mode: bool) -> None:
    """The supervisor: runs inside the node's tmux pane."""
    # deferred: only this command needs it (187 modules)
    from fractal.runtime.entry import exit_now, run_supervisor

    exit_now(run_supervisor(path, continue_mode=continue_mode, resume_mode=resume_mode))
