"""The worker pool's rules, table by table: claims and attempts, results, failures,
resume, the one review pass, the dispatcher's next move, and reading an items file."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fractal.domain.pool import (
    Item,
    ItemStatus,
    Next,
    PoolRefused,
    claim,
    clamp_workers,
    end_reason,
    fail,
    finish,
    next_move,
    parse_items,
    reject,
    resume,
    safe_item_id,
)

OP, C, D, F = ItemStatus.OPEN, ItemStatus.CLAIMED, ItemStatus.DONE, ItemStatus.FAILED


def item(status: ItemStatus = OP, attempts: int = 0, worker: str | None = None) -> Item:
    return Item("a", "do a", status, worker, attempts)


@pytest.mark.parametrize(("requested", "width"), [
    (None, 4), (0, 1), (-3, 1), (1, 1), (4, 4), (6, 6), (7, 6), (100, 6)])
def test_clamp_workers(requested: int | None, width: int) -> None:
    assert clamp_workers(requested) == width


# (move, before, after status, after attempts) — every legal move of one item
MOVES = [
    ("claim", item(OP, 0), C, 1),
    ("claim", item(OP, 1), C, 2),
    ("finish", item(C, 1, "w"), D, 1),
    ("fail", item(C, 1, "w"), OP, 1),
    ("fail", item(C, 2, "w"), F, 2),
    ("reject", item(D, 2, "w"), OP, 1),
    ("reject", item(D, 1, "w"), OP, 1),
    ("resume-dead", item(C, 1, "w"), OP, 1),
    ("resume-dead", item(C, 2, "w"), F, 2),
    ("resume-alive", item(C, 2, "w"), C, 2),
    ("resume-dead", item(OP, 1), OP, 1),
    ("resume-dead", item(D, 2, "w"), D, 2),
    ("resume-dead", item(F, 2, "w"), F, 2),
]


def apply(move: str, before: Item) -> Item:
    if move == "claim":
        return claim(before, "main.pool.a")
    if move == "finish":
        return finish(before, "made it\nwith two lines")
    if move == "fail":
        return fail(before, "exited: boom")
    if move == "reject":
        return reject(before, "not what the brief asked")
    return resume(before, worker_alive=move == "resume-alive")


@pytest.mark.parametrize(("move", "before", "status", "attempts"), MOVES)
def test_moves(move: str, before: Item, status: ItemStatus, attempts: int) -> None:
    after = apply(move, before)
    assert (after.status, after.attempts) == (status, attempts)


def test_results_and_worker() -> None:
    claimed = claim(item(), "main.pool.a")
    assert claimed.worker == "main.pool.a"
    assert finish(claimed, "made it\nwith two lines").result == "made it with two lines"
    assert fail(replace(claimed, attempts=2), "exited: boom").result == "exited: boom"
    assert resume(replace(claimed, attempts=2), False).result == "interrupted"
    assert reject(finish(claimed, "x"), "wrong").result == "rejected: wrong"


@pytest.mark.parametrize(("move", "before"), [
    ("claim", item(C, 1, "w")), ("claim", item(D, 1)), ("claim", item(OP, 2)),
    ("finish", item(OP, 1)), ("finish", item(D, 1)), ("fail", item(OP, 1)),
    ("fail", item(F, 2)), ("reject", item(OP, 1)), ("reject", item(F, 2)),
])
def test_illegal_moves_are_refused_naming_the_state(move: str, before: Item) -> None:
    with pytest.raises(PoolRefused, match=r"item a"):
        apply(move, before)


def test_attempts_rise_only_at_a_claim_across_a_whole_life() -> None:
    """claim, fail, claim, done, rejected, claim, done: attempts 1, 1, 2, 2, 1, 2, 2."""
    life = [claim, lambda i: fail(i, "x"), claim, lambda i: finish(i, "ok"),
            lambda i: reject(i, "no"), claim, lambda i: finish(i, "ok")]
    current, seen = item(), []
    for step in life:
        current = step(current, "w") if step is claim else step(current)  # type: ignore[operator]
        seen.append(current.attempts)
    assert seen == [1, 1, 2, 2, 1, 2, 2]


def pool(*statuses: ItemStatus) -> list[Item]:
    return [Item(f"i{n}", "", s) for n, s in enumerate(statuses)]


@pytest.mark.parametrize(("items", "review_done", "width", "move", "claim_ids"), [
    (pool(OP, OP, OP, OP, OP), False, 4, Next.CLAIM, ["i0", "i1", "i2", "i3"]),
    (pool(C, C, OP, OP, OP), False, 4, Next.CLAIM, ["i2", "i3"]),
    (pool(C, C, C, C, OP), False, 4, Next.WAIT, []),
    (pool(C, OP, OP), False, 1, Next.WAIT, []),
    (pool(C, D, F), False, 4, Next.WAIT, []),
    (pool(D, D, F), False, 4, Next.REVIEW, []),
    (pool(D, D, F), True, 4, Next.END, []),
    (pool(D, OP), True, 4, Next.CLAIM, ["i1"]),  # a rejected item after the review
    (pool(*[OP] * 9), False, 9, Next.CLAIM, [f"i{n}" for n in range(6)]),  # clamped to 6
])
def test_next_move(items: list[Item], review_done: bool, width: int, move: Next,
                   claim_ids: list[str]) -> None:
    got, chosen = next_move(items, review_done, width)
    assert got is move and [i.item_id for i in chosen] == claim_ids


def test_end_reason() -> None:
    assert end_reason(pool(D, D, F, D)) == "pool: 3 done, 1 failed"


@pytest.mark.parametrize(("text", "items"), [
    ('[{"id": "A 1", "input": "x"}, {"id": 2, "input": "y"}]', [("a-1", "x"), ("2", "y")]),
    ('["x", "y"]', [("1", "x"), ("2", "y")]),
    ('{"id": "one", "input": "x"}\n\n{"input": "y"}\n', [("one", "x"), ("2", "y")]),
    ("first line\n\n  second  \n", [("1", "first line"), ("2", "second")]),
    ('[{"id": "../../etc", "input": "x"}]', [("etc", "x")]),
    ('[{"id": "***", "input": "x"}]', [("item-1", "x")]),
])
def test_parse_items(text: str, items: list[tuple[str, str]]) -> None:
    assert parse_items(text) == items


@pytest.mark.parametrize(("text", "fragment"), [
    ("", "no item"), ('[{"id": "a"}]', "input"), ('[1]', "input"),
    ('[{"id": "a", "input": "x"}, {"id": "A", "input": "y"}]', "two items"),
    ("[not json", "not"), ('{"x"', "not JSON"), ('[{"input": "x"}] extra', "not"),
    ('{"input": "x"}\n{bad', "line 2"),
])
def test_parse_items_refuses(text: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        parse_items(text)


@pytest.mark.parametrize(("raw", "safe"), [
    ("Fix README", "fix-readme"), ("a.b:c", "a-b-c"), ("x" * 60, "x" * 40), ("", "item-7")])
def test_safe_item_id(raw: str, safe: str) -> None:
    assert safe_item_id(raw, 7) == safe
