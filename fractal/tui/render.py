"""Rich text for the dashboard's panes (pure rendering: values in, ``Text`` out)."""

from __future__ import annotations

from pathlib import Path

from rich.cells import cell_len
from rich.text import Text

from fractal.domain.dashview import Level, clock_label
from fractal.domain.termtext import terminal_text
from fractal.domain.treedraw import glyph
from fractal.domain.waits import STEP_WALL_NOTE, WAIT_STEP
from fractal.store.dashboard import History
from fractal.tui.snapshot import NodeView, Snapshot

STATUS_STYLE = {"active": "bold green", "paused": "yellow", "idle": "white",
                "completed": "cyan", "stopped": "magenta", "exited": "red", "killed": "red",
                "retired": "grey50"}
LEVEL_STYLE = {Level.OK: "green", Level.RESERVE: "yellow", Level.CAP: "bold red"}
GAUGE_CELLS = 8
TAIL_LINES = 14


def _usd(value: float | None) -> str:
    return "?" if value is None else f"${value:.2f}"


def spend_line(spent: float | None, cap: float | None) -> str:
    """The card's ``run spend $0.0040 of $2.0000``: USD to four places as ``fractal node
    cost`` prints them, ``?`` for an unknown spend, ``no cap`` for a run without one."""
    shown = "?" if spent is None else f"${spent:.4f}"
    return f"run spend {shown} of {'no cap' if cap is None else f'${cap:.4f}'}"


def node_label(view: NodeView, now: float) -> Text:
    """One tree line: mark, name, detail, spend gauge, stall mark."""
    status = "exited" if view.live.gone else view.status
    text = Text()
    text.append(f"{glyph(status)} ", style=STATUS_STYLE.get(status, ""))
    text.append(view.branch.rpartition(".")[2], style="bold")
    if view.pool is not None:
        text.append_text(pool_bar(*view.pool))
    if view.gauge is not None:
        filled = round(view.gauge.share * GAUGE_CELLS)
        style = LEVEL_STYLE[view.gauge.level]
        text.append(" ")
        text.append("▰" * filled, style=style)
        text.append("▱" * (GAUGE_CELLS - filled), style="grey42")
        text.append(f" {_usd(view.spent)}/{_usd(view.cap)}", style=style)
    detail = view.detail(now)
    if detail:
        text.append(f"  {detail}", style="grey62" if view.status != "active" else "")
    if view.stalled:
        text.append("  ! stalled", style="bold yellow")
    return text


def pool_bar(done: int, failed: int, claimed: int, total: int) -> Text:
    """A pool's item progress: `` ■■■□□□ 5/9 items (1 failed, 2 working)``; the cells
    are the settled share (done green, failed red)."""
    text = Text(" ")
    if total <= 0:
        return text
    ok = round(done / total * GAUGE_CELLS)
    bad = min(GAUGE_CELLS - ok, round(failed / total * GAUGE_CELLS))
    text.append("■" * ok, style="green")
    text.append("■" * bad, style="red")
    text.append("□" * (GAUGE_CELLS - ok - bad), style="grey42")
    extra = [f"{failed} failed"] if failed else []
    extra += [f"{claimed} working"] if claimed else []
    text.append(f" {done + failed}/{total} items" + (f" ({', '.join(extra)})" if extra
                                                     else ""))
    return text


def _remaining(started: float | None, limit: object, now: float) -> str:
    from fractal.domain.durations import parse_duration
    from fractal.errors import FractalError

    if started is None or not isinstance(limit, str):
        return ""
    try:
        left = started + parse_duration(limit.strip('"')) - now
    except FractalError:
        return ""
    return f" ({clock_label(left)} left)"


def card(view: NodeView | None, now: float) -> Text:
    """The node's card: status line, agent/model/session, walls with time left, caps."""
    if view is None:
        return Text("no node selected", style="grey50")
    text = Text()
    text.append(f"{view.branch}\n", style="bold")
    if view.title:
        text.append(f"{view.title}\n", style="italic")
    text.append(f"{view.status}", style=STATUS_STYLE.get(view.status, ""))
    text.append(f"  {view.detail(now)}\n")
    text.append(f"agent {view.agent or '-'} · model {view.model or '-'} · session "
                f"{view.session or '-'}\n", style="grey70")
    config = dict(view.config)
    walls = []
    for key, started in (("timeout", view.run_started), ("iter_timeout", view.iter_started),
                         ("step_timeout", view.live.step_started)):
        if key in config:
            left = _remaining(started, config[key], now) if view.status == "active" else ""
            if key == "step_timeout" and view.status == "active" \
                    and view.live.step_name == WAIT_STEP:
                left = f" ({STEP_WALL_NOTE})"
            walls.append(f"{key} {config[key].strip(chr(34))}{left}")
    if walls:
        text.append("walls: " + " · ".join(walls) + "\n")
    caps = [f"{k} {v.strip(chr(34))}" for k, v in view.config
            if k.startswith("max_") or k == "reserve_budget"]
    if caps:
        text.append("caps: " + " · ".join(caps) + "\n")
    text.append(spend_line(view.spent, view.cap) + "\n",
                style=LEVEL_STYLE[view.gauge.level] if view.gauge else "")
    return text


def _seconds(start: str, end: str | None, now: float) -> str:
    from fractal.store.timefmt import to_epoch

    stop = to_epoch(end) if end else now
    return clock_label(stop - to_epoch(start))


def explorer(history: History | None, now: float) -> Text:
    """Runs -> iterations -> steps, newest run first, with durations, costs, reasons;
    then the exit checks' trend (failures per check, oldest first)."""
    text = Text()
    if history is None or not history.runs:
        return Text("no runs yet", style="grey50")
    for run in history.runs:
        text.append(f"run {run.run_id} {run.status} {_seconds(run.started_at, run.ended_at, now)}"
                    f"{'  ' + run.meta if run.meta else ''}\n", style="bold")
        for it in history.iterations.get(run.run_id, [])[-5:]:
            text.append(f"  iter {it.iter} {it.status} "
                        f"{_seconds(it.started_at, it.ended_at, now)}\n")
            for step in history.steps.get(it.iter_id, [])[-12:]:
                cost = "" if step.cost is None else f" ${step.cost:.4f}"
                why = f"  {step.meta}" if step.meta else ""
                text.append(f"    {step.step} {step.step_name} {step.status} "
                            f"{_seconds(step.started_at, step.ended_at, now)}{cost}{why}\n",
                            style=STATUS_STYLE.get(step.status, ""))
    if history.checks:
        marks = " ".join("✓" if c.exit_code == 0 else str(c.failures or "✗")
                         for c in history.checks)
        text.append(f"checks (oldest first): {marks}\n")
    return text


def tail(path: Path, lines: int = TAIL_LINES) -> Text:
    """The last ``lines`` lines of the pane transcript (read from its last 16 KiB)."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - 16384))
            data = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return Text("(no pane transcript yet)", style="grey50")
    return Text.from_ansi("\n".join(data.splitlines()[-lines:]))


def inbox(snapshot: Snapshot) -> Text:
    """The attention items, oldest first, each with its command."""
    if not snapshot.inbox:
        return Text("nothing waits for you", style="grey50")
    text = Text()
    for entry in snapshot.inbox:
        item = entry.item
        text.append(f"{item.kind.value:<11}", style="bold yellow")
        text.append(f" {item.node.rpartition('.')[2]}: {terminal_text(item.summary)}\n")
        text.append(f"  → {item.command}\n", style="grey62")
    return text


def feed(snapshot: Snapshot) -> Text:
    """The radio feed: the newest messages, newest first."""
    if not snapshot.feed:
        return Text("no messages", style="grey50")
    text = Text()
    for line in snapshot.feed[:12]:
        text.append(f"{line.created_at[11:19]} ", style="grey50")
        text.append(f"{line.node.rpartition('.')[2]}", style="bold")
        text.append(f" {line.subject}\n")
    return text


def same_height(before: object, after: object, width: int) -> bool:
    """True when two pane texts (``_put`` keys) take the same lines at ``width`` cells: as
    many lines, none wrapped. Then the update needs no new layout of the screen."""
    if not (isinstance(before, tuple) and isinstance(after, tuple)) or width <= 0:
        return False
    old, new = str(before[0]).split("\n"), str(after[0]).split("\n")
    return len(old) == len(new) and all(cell_len(line) < width for line in old + new)
