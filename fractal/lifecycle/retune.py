"""Live retuning: ``fractal node config get|set`` and ``fractal node update`` (docs/configuration.md: which keys a running loop re-reads).

Every write is a read-merge-write of ``config.json`` under its lock, validated as a whole
before it lands (atomically), so a running loop only ever reads a complete, valid file.
``update`` also writes the registry row; the loop heals any drift a direct edit leaves.
When ``max_cost`` changes and the reserve was the default 10% (or unset), the reserve is
re-derived from the new ceiling, and the node's open run records the new ceiling (the loop
enforces the lower of that record and the file).

A node retuning itself may only tighten (``fractal.domain.selflimits``): the change is
compared with the file as it is under the lock, and a loosening is refused, recorded as a
``failed`` event, naming who may make it instead.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from fractal.domain import budget, selflimits
from fractal.domain.authority import parent_of
from fractal.domain.config import KEYS, coerce_value, parse_config, resolve_reserve, validate_config
from fractal.errors import ConfigError, FractalError, InvalidValue
from fractal.lifecycle.context import Context
from fractal.tree import Tree
from fractal.workspace.nodedir import read_config, update_config

__all__ = ["IMMUTABLE", "UPDATE_KEYS", "Change", "Retuned", "arm_max_cost", "config_get",
           "config_set", "update_node"]

IMMUTABLE = ("root", "user", "parent")
"""Keys no command may change: they tie the node to its tree."""

UPDATE_KEYS = ("title", "max_cost", "max_iter_cost", "max_step_cost", "reserve_budget",
               "step_timeout", "max_depth", "max_children", "max_descendants")
"""What ``fractal node update`` retunes (docs/cli.md)."""

_REGISTRY_CAPS = ("max_cost", "max_depth", "max_children", "max_descendants")


@dataclass(frozen=True)
class Change:
    """One key that changed: JSON values before and after."""

    key: str
    old: object
    new: object

    @property
    def line(self) -> str:
        """``key: old -> new`` with JSON values (``null`` when unset)."""
        return f"{self.key}: {json.dumps(self.old)} -> {json.dumps(self.new)}"


@dataclass(frozen=True)
class Retuned:
    """What a retune wrote: the node (None: the tree's root), its config file, the changes."""

    branch: str | None
    config_path: Path
    changes: tuple[Change, ...]


def _caller_config(ctx: Context) -> tuple[Tree, str, Path]:
    tree, branch = ctx.tree, ctx.caller
    path = tree.config_path if branch == tree.root else tree.node(branch).config_path
    return tree, branch, path


def config_get(ctx: Context, key: str) -> object:
    """The JSON value of ``key`` in the caller's config.json (None: unset or null).

    Raises InvalidValue for a key that is neither in the schema nor in the file.
    """
    _tree, _branch, path = _caller_config(ctx)
    raw = read_config(path)
    if key not in KEYS and key not in raw:
        raise InvalidValue(f"unknown config key {key!r}; valid keys: {', '.join(KEYS)}")
    return raw.get(key)


def _parse_assignments(assignments: Sequence[str]) -> dict[str, object]:
    values: dict[str, object] = {}
    problems: list[str] = []
    for item in assignments:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            problems.append(f"{item!r}: write KEY=VALUE (KEY=null clears a key)")
            continue
        if key in IMMUTABLE:
            problems.append(f"{key}: is immutable; it ties the node to its tree")
            continue
        try:
            values[key] = coerce_value(key, text)
        except FractalError as exc:
            problems.append(str(exc))
    if problems:
        raise ConfigError(problems)
    return values


class _Loosens(FractalError):
    """A node's change to its own config would loosen it; the message is the refusal."""


def _self_guard(tree: Tree, branch: str) -> Callable[[dict[str, object], dict[str, object]],
                                                      None]:
    """The tighten-only check of ``branch`` retuning itself: raises _Loosens when the merged
    file loosens the file as it was (``selflimits``), or when the file as it was does not
    validate (nothing to measure a tightening against)."""
    def guard(before: dict[str, object], merged: dict[str, object]) -> None:
        try:
            old = parse_config(before)
        except ConfigError as exc:
            raise _Loosens(f"{branch}'s config.json does not validate now ({exc}), so a change "
                           "by the node itself cannot be told from a loosening; fix the file "
                           "by hand, or ask its parent or the operator to set the keys with "
                           f"`fractal node config set --node {branch} KEY=VALUE`") from exc
        found = selflimits.loosenings(old, parse_config(merged))
        if found:
            raise _Loosens(selflimits.refusal(branch, parent_of(branch), tree.root, found))
    return guard


def _checker(updates: Mapping[str, object], reserve_text: str | None, source: str,
             seen: list[dict[str, object]],
             guard: Callable[[dict[str, object], dict[str, object]], None] | None = None
             ) -> Callable[[dict[str, object], dict[str, object]], None]:
    """The under-lock step of a write: resolve the reserve, validate the whole file, then
    ``guard`` (a node retuning itself); the file as it was goes to ``seen`` (for the
    echo)."""
    def check(before: dict[str, object], merged: dict[str, object]) -> None:
        seen.append(before)
        new_max = merged.get("max_cost")
        cap = float(new_max) if isinstance(new_max, int | float) else None
        if reserve_text is not None:
            merged["reserve_budget"] = resolve_reserve(reserve_text, cap)
        elif "max_cost" in updates and "reserve_budget" not in updates:
            old_max, old_reserve = before.get("max_cost"), before.get("reserve_budget")
            derived = isinstance(old_max, int | float) and isinstance(old_reserve, int | float) \
                and budget.default_reserve(float(old_max)) == budget.round_usd(old_reserve)
            if old_reserve is None or derived:
                merged["reserve_budget"] = None if cap is None else budget.default_reserve(cap)
        problems = validate_config(merged)
        if problems:
            raise ConfigError(problems, source=source)
        if guard is not None:
            guard(before, merged)
    return check


def _write(tree: Tree, branch: str, path: Path, updates: Mapping[str, object], *,
           reserve_text: str | None = None, ctx: Context | None = None,
           verb: str = "config") -> Retuned:
    """Write ``updates`` to ``branch``'s config at ``path``. With ``ctx`` whose acting node
    is ``branch`` itself, only a tightening is written; a loosening raises Refused,
    recorded as a failed ``verb`` event on ``branch``."""
    seen: list[dict[str, object]] = []
    own = ctx is not None and branch != tree.root and ctx.acting == branch
    guard = _self_guard(tree, branch) if own else None
    try:
        merged = update_config(path, updates,
                               check=_checker(updates, reserve_text, str(path), seen, guard))
    except _Loosens as exc:
        assert ctx is not None
        raise ctx.refuse(verb, branch, str(exc)) from None
    before = seen[0]
    keys = [*updates, *(["reserve_budget"] if "reserve_budget" not in updates else [])]
    changes = tuple(Change(k, before.get(k), merged.get(k)) for k in keys
                    if before.get(k) != merged.get(k))
    if branch != tree.root:
        _sync_registry(tree, branch, merged,
                       run_cap=any(c.key == "max_cost" for c in changes))
    return Retuned(None if branch == tree.root else branch, path, changes)


def _sync_registry(tree: Tree, branch: str, config: Mapping[str, object], *,
                   run_cap: bool = False) -> None:
    """Write the caps and title of ``config`` to the registry row (when registered); with
    ``run_cap`` also the ceiling the node's open run records (the loop enforces the lower
    of that record and config.json, so a hand edit cannot lift it)."""
    from fractal.store.ledger import Ledger

    ledger = Ledger(tree.db_path)
    if ledger.node(branch) is None:
        return
    caps = {k: v for k in _REGISTRY_CAPS
            if isinstance(v := config.get(k), int | float | type(None))}
    ledger.set_caps(branch, caps)
    if run_cap:
        cap = config.get("max_cost")
        ledger.set_run_cap(branch, float(cap) if isinstance(cap, int | float) else None)
    title = config.get("title")
    ledger.set_title(branch, title if isinstance(title, str) else None)


def config_set(ctx: Context, assignments: Sequence[str], node: str | None = None) -> Retuned:
    """Set ``KEY=VALUE`` pairs in the caller's config.json, or in node ``node``'s (typed,
    validated, atomic).

    ``KEY=null`` clears a key; ``root``, ``user`` and ``parent`` are refused. Without
    ``node`` the acting node must be the caller's (inside a loop, only the loop's own
    node's config; the ``config`` rule); with ``node`` it must be that node or an ancestor
    (the ``update`` rule). A node setting its own keys may only tighten them
    (``domain.selflimits``). Raises ConfigError listing every problem (nothing is written
    then); Refused for a node that may not act, or a loosening of its own limits;
    NodeNotFound.
    """
    if node is None:
        tree, branch, path = _caller_config(ctx)
        verb = "config"
    else:
        tree, branch, verb = ctx.tree, ctx.target(node), "update"
        path = tree.node(branch).config_path
    ctx.authorize(verb, branch)
    if node is not None:
        from fractal.lifecycle.cleanup import refuse_if_gone
        from fractal.store import reader

        refuse_if_gone(tree, reader.node_row(tree.db_path, branch), "update")
    return _write(tree, branch, path, _parse_assignments(assignments), ctx=ctx, verb=verb)


def update_node(ctx: Context, name: str | None, values: Mapping[str, str | None]) -> Retuned:
    """Retune node ``name``: ``values`` maps UPDATE_KEYS to command-line text (None: not
    given). ``reserve_budget`` may be ``N%`` of the (new) ``max_cost``. Writes config.json
    and the registry row. Raises Refused when the acting node may not retune ``name``
    (``fractal.domain.authority``), ConfigError, InvalidValue, NodeNotFound.
    """
    tree, branch = ctx.tree, ctx.target(name)
    ctx.authorize("update", branch)
    from fractal.lifecycle.cleanup import refuse_if_gone
    from fractal.store import reader

    refuse_if_gone(tree, reader.node_row(tree.db_path, branch), "update")  # no stray config
    given = {k: v for k, v in values.items() if v is not None}
    unknown = sorted(set(given) - set(UPDATE_KEYS))
    if unknown:
        raise InvalidValue(f"cannot update {', '.join(unknown)}; updatable keys: "
                           f"{', '.join(UPDATE_KEYS)}")
    if not given:
        raise InvalidValue(f"nothing to update; give at least one of "
                           f"{', '.join('--' + k.replace('_', '-') for k in UPDATE_KEYS)}")
    reserve = given.pop("reserve_budget", None)
    updates: dict[str, object] = {}
    problems: list[str] = []
    for key, text in given.items():
        try:
            updates[key] = coerce_value(key, text)
        except FractalError as exc:
            problems.append(str(exc))
    if problems:
        raise ConfigError(problems)
    if reserve is not None and reserve.strip() == "null":
        updates["reserve_budget"], reserve = None, None
    return _write(tree, branch, tree.node(branch).config_path, updates, reserve_text=reserve,
                  ctx=ctx, verb="update")


def arm_max_cost(tree: Tree, branch: str, text: str,
                 ctx: Context | None = None) -> Callable[[], None]:
    """Arm ``max_cost`` for the next run (``start --max-cost``); returns an undo that puts the
    previous ceiling, reserve and registry row back (when the launch fails). Given ``ctx``
    whose acting node is ``branch`` itself, only a lower ceiling is armed (Refused
    otherwise, recorded as a failed ``start`` event)."""
    path = tree.node(branch).config_path
    before = read_config(path)
    _write(tree, branch, path, {"max_cost": coerce_value("max_cost", text)}, ctx=ctx,
           verb="start")

    def undo() -> None:
        restore = {"max_cost": before.get("max_cost"),
                   "reserve_budget": before.get("reserve_budget")}
        merged = update_config(path, restore)
        _sync_registry(tree, branch, merged)

    return undo
