"""The worker pool's rules: one item list, one worker node per item, bounded width.

The pool node dispatches; workers never invoke each other and never write the pool
state (fractal writes it). Each item moves ``open -> claimed -> done | failed``:

- **claim**: an ``open`` item is marked ``claimed`` for a worker before the worker
  starts, and ``attempts`` goes up by exactly one. This is the only place it changes
  upwards, so no item runs twice and attempts count launches.
- **result**: a worker that finished well marks its item ``done`` with a one-line result.
- **failure**: ``attempts`` untouched; below ``MAX_ATTEMPTS`` the item is ``open`` again,
  at it the item is ``failed`` with the error as its result.
- **resume**: a ``claimed`` item whose worker is not alive goes back to ``open`` (its
  attempt already counted), or to ``failed`` with result ``interrupted`` at the maximum.
- **review**: once nothing is open or claimed, one review pass runs over the results;
  each item it rejects goes back to ``open`` with ``attempts`` reset to 1, so it gets
  exactly one more attempt. There is no second review; then the pool ends.

Width: at most ``max_workers`` claimed at a time, default 4, clamped to 1..6.
Pure: values in, values out. Table-tested in tests/unit/test_pool_rules.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

__all__ = [
    "DEFAULT_WORKERS",
    "MAX_ATTEMPTS",
    "MAX_WORKERS",
    "Item",
    "ItemStatus",
    "Next",
    "PoolRefused",
    "Worker",
    "WorkerFacts",
    "claim",
    "clamp_workers",
    "end_reason",
    "fail",
    "finish",
    "next_move",
    "parse_items",
    "pool_document",
    "progress",
    "reject",
    "resume",
    "safe_item_id",
    "settle",
    "worker_name",
    "worker_task",
]

DEFAULT_WORKERS = 4
MAX_WORKERS = 6
MAX_ATTEMPTS = 2
INTERRUPTED = "interrupted"


class ItemStatus(StrEnum):
    """Where one item is in the pool."""

    OPEN = "open"
    CLAIMED = "claimed"
    DONE = "done"
    FAILED = "failed"


@dataclass(frozen=True)
class Item:
    """One item of the pool: ``item_id`` (safe for a branch name), its ``input`` text,
    status, the worker node holding or last holding it, attempts so far, result."""

    item_id: str
    input: str
    status: ItemStatus = ItemStatus.OPEN
    worker: str | None = None
    attempts: int = 0
    result: str = ""


class PoolRefused(ValueError):
    """A move the pool rules do not allow (the message names the item and its state)."""


def clamp_workers(requested: int | None) -> int:
    """``max_workers`` as used: None -> 4; otherwise clamped to 1..6."""
    if requested is None:
        return DEFAULT_WORKERS
    return max(1, min(MAX_WORKERS, requested))


def _expect(item: Item, status: ItemStatus, move: str) -> None:
    if item.status is not status:
        raise PoolRefused(f"cannot {move} item {item.item_id}: it is {item.status.value}, "
                          f"not {status.value}")


def claim(item: Item, worker: str) -> Item:
    """``open`` -> ``claimed`` for ``worker``; attempts + 1. Refused past MAX_ATTEMPTS."""
    _expect(item, ItemStatus.OPEN, "claim")
    if item.attempts >= MAX_ATTEMPTS:
        raise PoolRefused(f"cannot claim item {item.item_id}: it has had {item.attempts} "
                          f"attempts, the most an item gets")
    return replace(item, status=ItemStatus.CLAIMED, worker=worker, attempts=item.attempts + 1)


def finish(item: Item, result: str) -> Item:
    """``claimed`` -> ``done`` with a one-line ``result``."""
    _expect(item, ItemStatus.CLAIMED, "finish")
    return replace(item, status=ItemStatus.DONE, result=_one_line(result))


def fail(item: Item, error: str) -> Item:
    """A worker's failure: ``open`` again below MAX_ATTEMPTS, else ``failed``."""
    _expect(item, ItemStatus.CLAIMED, "fail")
    if item.attempts < MAX_ATTEMPTS:
        return replace(item, status=ItemStatus.OPEN, result=_one_line(error))
    return replace(item, status=ItemStatus.FAILED, result=_one_line(error))


def resume(item: Item, worker_alive: bool) -> Item:
    """On resume: a ``claimed`` item without a live worker is ``open`` again (or ``failed``
    ``interrupted`` at MAX_ATTEMPTS); every other item is unchanged."""
    if item.status is not ItemStatus.CLAIMED or worker_alive:
        return item
    if item.attempts >= MAX_ATTEMPTS:
        return replace(item, status=ItemStatus.FAILED, result=INTERRUPTED)
    return replace(item, status=ItemStatus.OPEN)


def reject(item: Item, reason: str) -> Item:
    """The review pass rejects a ``done`` item: ``open`` with attempts reset to 1."""
    _expect(item, ItemStatus.DONE, "reject")
    return replace(item, status=ItemStatus.OPEN, attempts=1,
                   result=_one_line(f"rejected: {reason}"))


class Next(StrEnum):
    """What the dispatcher does next."""

    CLAIM = "claim"  # start workers on the open items returned with it
    WAIT = "wait"  # every slot is busy, or only claimed items remain
    REVIEW = "review"  # nothing open or claimed, review not run yet
    END = "end"  # nothing open or claimed, review done


def next_move(items: Sequence[Item], review_done: bool,
              max_workers: int) -> tuple[Next, list[Item]]:
    """The dispatcher's next move and, for CLAIM, the open items to claim now (oldest
    first, as many as free slots allow)."""
    claimed = sum(1 for i in items if i.status is ItemStatus.CLAIMED)
    open_items = [i for i in items if i.status is ItemStatus.OPEN]
    if open_items:
        free = clamp_workers(max_workers) - claimed
        if free <= 0:
            return Next.WAIT, []
        return Next.CLAIM, open_items[:free]
    if claimed:
        return Next.WAIT, []
    return (Next.END, []) if review_done else (Next.REVIEW, [])


def end_reason(items: Iterable[Item]) -> str:
    """The pool run's reason: ``pool: 7 done, 2 failed``."""
    listed = list(items)
    done = sum(1 for i in listed if i.status is ItemStatus.DONE)
    failed = sum(1 for i in listed if i.status is ItemStatus.FAILED)
    return f"pool: {done} done, {failed} failed"


def _one_line(text: str, limit: int = 250) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


_UNSAFE = re.compile(r"[^a-z0-9_-]+")


def safe_item_id(raw: str, index: int) -> str:
    """An item id usable as one segment of a node's branch name: lower-case letters,
    digits, ``-`` and ``_`` (others folded to ``-``), at most 40 characters; an id with
    nothing usable becomes ``item-<index>``."""
    folded = _UNSAFE.sub("-", raw.strip().lower()).strip("-")[:40].strip("-")
    return folded or f"item-{index}"


def parse_items(text: str) -> list[tuple[str, str]]:
    """``[(item id, input), ...]`` from an items file, ids made safe and unique.

    Formats: a JSON array (of objects with ``id`` and ``input``, or of strings); JSON
    lines (one such object per line); else plain lines (each non-blank line an input,
    numbered ids). Raises ValueError naming the problem: an object without ``input``,
    two items with one id, or no item at all.
    """
    stripped = text.strip()
    entries: list[object]
    if stripped.startswith("["):
        try:
            loaded = json.loads(stripped)
        except ValueError as exc:
            raise ValueError(f"the items file looks like JSON but is not: {exc}") from None
        except RecursionError:  # nested past the parser's depth: no items file is
            raise ValueError("the items file's JSON is nested too deeply; an item is an "
                             "object with id and input, or a string") from None
        if not isinstance(loaded, list):
            raise ValueError("a JSON items file must hold an array")
        entries = list(loaded)
    elif stripped.startswith("{"):
        entries = []
        for number, line in enumerate(stripped.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                entries.append(json.loads(line))
            except (ValueError, RecursionError):
                raise ValueError(f"line {number} of the JSON-lines items file is not "
                                 "JSON") from None
    else:
        entries = [line.strip() for line in stripped.splitlines() if line.strip()]
    items: list[tuple[str, str]] = []
    seen: set[str] = set()
    for index, entry in enumerate(entries, start=1):
        if isinstance(entry, str):
            raw_id, value = str(index), entry
        elif isinstance(entry, dict) and isinstance(entry.get("input"), str):
            raw_id = str(entry.get("id") if entry.get("id") is not None else index)
            value = entry["input"]
        else:
            raise ValueError(f"item {index} needs an \"input\" string")
        ident = safe_item_id(raw_id, index)
        if worker_name(ident) in seen:
            raise ValueError(f"two items have the id {ident!r} (their worker node would be "
                             "one: '-' and '_' are the same there); give each a unique id")
        seen.add(worker_name(ident))
        items.append((ident, value))
    if not items:
        raise ValueError("the items file holds no item")
    return items


def worker_name(item_id: str) -> str:
    """The node name of an item's worker (the last segment of ``<pool>.<name>``): the safe
    id with ``-`` as ``_`` (node names hold letters, digits and ``_``)."""
    return item_id.replace("-", "_")


def worker_task(brief: str, pool: str, item: Item, previous: str = "") -> str:
    """The task (NODE.md Instructions) of the worker of ``item``: the pool's brief, then
    that one item, then how to report (one line with ``fractal pool result``); on a later
    attempt ``previous`` (how the last one ended, or the review's rejection) too."""
    text = (f"{brief.strip()}\n\n### Your item\n\nYou work exactly one item of the pool "
            f"`{pool}`: item `{item.item_id}`.\n\n~~~text\n{item.input.strip()}\n~~~\n\n"
            "Do the brief for this item only. Commit your work (`$FRACTAL_BIN commit`), then "
            "report the outcome in one line: `$FRACTAL_BIN pool result \"what you did\"` "
            "(without it the pool records your last commit subject).\n")
    if previous.strip():
        text += (f"\n### Attempt {item.attempts}\n\nThe previous attempt at this item "
                 f"ended: {previous.strip()}\n")
    return text


class Worker(StrEnum):
    """What the dispatcher makes of a claimed item's worker node."""

    LIVE = "live"  # running, paused or waiting: leave the claim alone
    DONE = "done"  # its run for this claim completed: merge, then finish the item
    FAILED = "failed"  # its run for this claim ended otherwise: a failed attempt
    GONE = "gone"  # no run for this claim (never started, or missing): the resume rule


@dataclass(frozen=True)
class WorkerFacts:
    """A claimed item's worker as the records show it: ``status`` its node status (None:
    no such node), ``run_ended``/``run_status`` its newest run's end instant and status
    (None: no run, or still open), ``claimed_at`` when the item was claimed. Instants are
    the store's UTC text, which sorts in time order."""

    status: str | None
    claimed_at: str | None
    run_ended: str | None = None
    run_status: str | None = None


_LIVE_STATUSES = frozenset({"active", "paused"})


def settle(facts: WorkerFacts) -> Worker:
    """The dispatcher's reading of a claimed item's worker.

    ``active`` or ``paused`` -> LIVE (a paused worker resumes with its pool); a node whose
    newest run ended at or after the claim -> DONE when that run ``completed``, else
    FAILED (a run a hand-back re-armed before the claim counts: it ends after it);
    anything else (no node, a node never started, a newest run that ended before the
    claim) -> GONE: the claim outlived its dispatcher before the worker started, and
    ``resume`` decides.
    """
    if facts.status in _LIVE_STATUSES:
        return Worker.LIVE
    if facts.run_ended is None or facts.run_status is None or facts.claimed_at is None \
            or facts.run_ended < facts.claimed_at:
        return Worker.GONE
    return Worker.DONE if facts.run_status == "completed" else Worker.FAILED


def progress(items: Iterable[Item]) -> tuple[int, int, int, int]:
    """(done, failed, claimed, total) of a pool's items."""
    listed = list(items)
    count = {s: sum(1 for i in listed if i.status is s) for s in ItemStatus}
    return (count[ItemStatus.DONE], count[ItemStatus.FAILED], count[ItemStatus.CLAIMED],
            len(listed))


def pool_document(pool: str, items: Sequence[Item], review_done: bool) -> str:
    """The POOL section of a pool node's prompts: every item with its status, attempts and
    result, and the review's one command (``fractal pool reject ID --reason TEXT``)."""
    done, failed, claimed, total = progress(items)
    lines = [f"## Worker pool {pool}", "",
             f"{total} items: {done} done, {failed} failed, {claimed} being worked, "
             f"{total - done - failed - claimed} open. fractal dispatches the workers and "
             "merges each done worker into this branch; you never start them yourself.", "",
             "| item | status | attempts | worker | result |", "| --- | --- | --- | --- | --- |"]
    for item in items:
        result = item.result.replace("|", "\\|")
        lines.append(f"| {item.item_id} | {item.status.value} | {item.attempts} | "
                     f"{item.worker or ''} | {result} |")
    lines.append("")
    if review_done:
        lines += ["This is the pool's one review pass. Read each done item's work (its "
                  "merge commit on this branch, or `$FRACTAL_BIN node diff WORKER`) against the "
                  "brief. For an item that does not meet it, run "
                  "`$FRACTAL_BIN pool reject ITEM --reason \"why\"`: it goes back to the pool for "
                  "one more attempt. Items you do not reject stand. There is no second "
                  "review.", ""]
    return "\n".join(lines)
