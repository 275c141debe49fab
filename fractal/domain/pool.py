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
    "claim",
    "clamp_workers",
    "end_reason",
    "fail",
    "finish",
    "next_move",
    "parse_items",
    "reject",
    "resume",
    "safe_item_id",
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
            except ValueError:
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
        if ident in seen:
            raise ValueError(f"two items have the id {ident!r}; give each a unique id")
        seen.add(ident)
        items.append((ident, value))
    if not items:
        raise ValueError("the items file holds no item")
    return items
