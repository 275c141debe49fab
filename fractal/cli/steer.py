"""``fractal node stop|finish|pause|resume|kill|approve|pending|done``: steer a live tree."""

from __future__ import annotations

from pathlib import Path

import click

from fractal.cli.context import PATH_OPTION, verb_context
from fractal.cli.format import format_options, output_format, render_rows

REASON_OPTION = click.option("--reason", default=None, help="Why; recorded with the signal.")


def _report(results: list[object]) -> None:
    from fractal.lifecycle.steer import result_lines

    for line in result_lines(results):
        click.echo(line, err=True)


@click.command("stop")
@click.argument("node", required=False)
@REASON_OPTION
@PATH_OPTION
def stop_cmd(node: str | None, reason: str | None, path: Path) -> None:
    """End NODE's run after its current step (descendants first)."""
    from fractal.domain.signals import Signal
    from fractal.lifecycle.steer import send

    _report(list(send(verb_context(path), node, Signal.STOP, reason)))


@click.command("finish")
@click.argument("node", required=False)
@REASON_OPTION
@click.option("--cancel", is_flag=True, help="Withdraw NODE's own pending finish.")
@PATH_OPTION
def finish_cmd(node: str | None, reason: str | None, cancel: bool, path: Path) -> None:
    """End NODE's run after its current iteration, once its children have finished."""
    from fractal.domain.signals import Signal
    from fractal.lifecycle.steer import cancel_finish, send

    if cancel:
        _report([cancel_finish(verb_context(path), node)])
        return
    _report(list(send(verb_context(path), node, Signal.FINISH, reason)))


@click.command("done")
@click.option("--reason", default=None,
              help="What was achieved; the run's reason reads `Done: REASON`.")
@PATH_OPTION
def done_cmd(reason: str | None, path: Path) -> None:
    """End this node's own run, completed, after the current step (run it from the node's
    own step, once its work is done and its children's work merged)."""
    from fractal.lifecycle.steer import declare_done

    _report([declare_done(verb_context(path), reason)])


@click.command("pause")
@click.argument("node", required=False)
@REASON_OPTION
@PATH_OPTION
def pause_cmd(node: str | None, reason: str | None, path: Path) -> None:
    """Abort NODE's in-flight agent and park its run (node first, then descendants)."""
    from fractal.domain.signals import Signal
    from fractal.lifecycle.steer import send

    _report(list(send(verb_context(path), node, Signal.PAUSE, reason)))


@click.command("resume")
@click.argument("node", required=False)
@click.option("--refresh-env", is_flag=True,
              help="Relaunch with this shell's environment instead of the one the run "
                   "started with (prints the names that changed).")
@PATH_OPTION
def resume_cmd(node: str | None, refresh_env: bool, path: Path) -> None:
    """Relaunch NODE's parked run, and its paused descendants (deepest first)."""
    from fractal.lifecycle.resume import resume

    _report(list(resume(verb_context(path), node, refresh_env=refresh_env)))


@click.command("kill")
@click.argument("node", required=False)
@REASON_OPTION
@PATH_OPTION
def kill_cmd(node: str | None, reason: str | None, path: Path) -> None:
    """Kill NODE and its descendants now: loop, agent and pane; rows close ``killed``."""
    from fractal.lifecycle.kill import kill

    _report(list(kill(verb_context(path), node, reason)))


@click.command("approve")
@click.argument("node")
@click.argument("step_id", required=False, type=int)
@PATH_OPTION
def approve_cmd(node: str, step_id: int | None, path: Path) -> None:
    """Release NODE's step awaiting approval (its pending one, or STEP_ID)."""
    from fractal.lifecycle.approve import approve, approved_line

    click.echo(approved_line(approve(verb_context(path), node, step_id)), err=True)


@click.command("pending")
@click.argument("node", required=False)
@click.option("--all", "whole", is_flag=True, help="Every gate of NODE's whole subtree.")
@format_options
@PATH_OPTION
def pending_cmd(node: str | None, whole: bool, as_json: bool, as_csv: bool,
                path: Path) -> None:
    """List gated steps awaiting approval: NODE's children's (every gate of the tree at
    the root; NODE's whole subtree with --all)."""
    from fractal.lifecycle.approve import pending

    rows = pending(verb_context(path), node, whole=whole)
    click.echo(render_rows(rows, ["branch", "step_id", "step", "step_name", "diffstat"],
                           fmt=output_format(as_json, as_csv)))
