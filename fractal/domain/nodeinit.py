"""What ``fractal node init`` seeds besides the packaged files: the task in NODE.md's
Instructions (``--task``), approval gates on chosen steps (``--gate``), what a child
takes over from its parent (``--inherit``), and the limits a child inherits when its
spawn does not state them (depth and a budget share). Pure text and set rules; no I/O.

Limits a child inherits: its ``max_depth`` (levels it may spawn below itself) is its
parent's minus one, never below 0; a top-level node's parent is the root, whose levels
are the tree's ``max_depth`` (the root config.json, set by ``fractal init --max-depth``;
DEFAULT_TREE_DEPTH when the key is absent, unlimited when it is null). A child spawned
from inside a capped node without ``--max-cost`` gets ``budget_share`` of the parent's
remaining budget: remaining / (the parent's ``max_children``, or SHARE_DIVISOR when it
has none), rounded down to the cent.

``--inherit`` names surfaces, comma-separated: ``steps`` (the parent's step files),
``scripts`` (its ``scripts/``), ``config`` (its preferences: agent, model, cadence and
retry settings, never a budget, cap or wall) or ``all`` (the three).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence

from fractal.domain.config import KEYS, validate_config
from fractal.domain.errors import InvalidValue
from fractal.domain.frontmatter import normalise_newlines

__all__ = ["DEFAULT_TREE_DEPTH", "INHERIT_SURFACES", "PREFERENCE_KEYS", "SHARE_DIVISOR",
           "budget_share", "child_caps", "fill_instructions", "inherited_depth",
           "inherited_preferences", "match_step", "parse_inherit", "parse_tree_depth",
           "restored_settings",
           "tree_depth", "uncommitted_warning", "with_approval_gate"]

INHERIT_SURFACES: tuple[str, ...] = ("steps", "scripts", "config")
"""What ``--inherit`` can copy from the parent (``all``: every one)."""

PREFERENCE_KEYS: frozenset[str] = frozenset({
    "agent", "provider", "model", "effort", "sync", "detached", "local", "step_retries",
    "step_retry_backoff", "wait", "check_timeout", "no_progress", "interval", "sleep"})
"""The config keys ``--inherit config`` copies: how the parent works, never what it may
spend (``max_cost``, ``max_iter_cost``, ``max_step_cost``, ``reserve_budget``), its time
walls and iteration count, its spawn caps, its scope, checks or lineage."""

DEFAULT_TREE_DEPTH = 2
"""Levels of nodes below the root a tree allows when its config.json names no
``max_depth``: a lead and its children (whose prompts carry no spawn protocol)."""

SHARE_DIVISOR = 4
"""How many children a parent's remaining budget is split between when the parent names
no ``max_children``."""


def tree_depth(root_config: Mapping[str, object]) -> int | None:
    """The tree's ``max_depth`` from the root's config.json: DEFAULT_TREE_DEPTH when the
    key is absent or not a count, None (unlimited) when it is null."""
    if "max_depth" not in root_config:
        return DEFAULT_TREE_DEPTH
    value = root_config["max_depth"]
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return DEFAULT_TREE_DEPTH


def parse_tree_depth(text: str) -> int | None:
    """``fractal init --max-depth TEXT``: a whole number of levels below the root, at
    least 1, or ``unlimited`` (None). Raises InvalidValue naming both forms."""
    word = text.strip().lower()
    if word in ("unlimited", "null", "none"):
        return None
    if word.isdigit() and int(word) >= 1:
        return int(word)
    raise InvalidValue(f"--max-depth {text}: give the levels of nodes the tree allows below "
                       f"its root, a whole number of at least 1 (default "
                       f"{DEFAULT_TREE_DEPTH}), or `unlimited`")


def inherited_depth(parent_levels: int | None) -> int | None:
    """A child's ``max_depth`` when its spawn names none: the levels its parent may still
    spawn (``parent_levels``; the tree's depth for the root) minus the child's own level,
    never below 0. None (unlimited) stays None."""
    return None if parent_levels is None else max(0, parent_levels - 1)


def budget_share(remaining: float, max_children: int | None) -> float:
    """A child's ``max_cost`` (USD) when its spawn names none: ``remaining`` (the parent's
    budget left) / ``max_children`` (SHARE_DIVISOR when None or 0), rounded down to the
    cent, never below 0."""
    divisor = max_children or SHARE_DIVISOR
    return max(0.0, math.floor(max(0.0, remaining) / divisor * 100) / 100)


def child_caps(depth_left: int | None, remaining: float | None,
               max_children: int | None) -> str:
    """The cap options of the spawn template a node's prompt carries (``--max-children N
    --max-depth N [--max-cost USD]``), filled with what a child would inherit:
    ``depth_left`` is the node's own ``max_depth`` (None: unlimited, the child gets 1),
    ``remaining`` its budget left (None: uncapped, no ``--max-cost``), ``max_children``
    its own cap. A child with no level left gets ``--max-children 0``."""
    depth = inherited_depth(depth_left)
    depth = 1 if depth is None else depth
    options = f"--max-children {SHARE_DIVISOR if depth > 0 else 0} --max-depth {depth}"
    if remaining is not None:
        options += f" --max-cost {budget_share(remaining, max_children):.2f}"
    return options


_STEP_FILE = re.compile(r"(\d+)-(.+)\.md")
_HEADING = re.compile(r"^##\s+(.*?)\s*$")
_FENCE = re.compile(r"---[ \t]*")
_APPROVAL = re.compile(r"requires_approval\s*:.*")


def parse_inherit(text: str | None) -> frozenset[str]:
    """The surfaces ``--inherit TEXT`` names (empty for None). Raises InvalidValue for an
    unknown name."""
    if text is None:
        return frozenset()
    names = {part.strip().lower() for part in text.split(",") if part.strip()}
    if not names:
        raise InvalidValue("--inherit: name what to inherit: steps, scripts, config or all")
    unknown = sorted(names - {*INHERIT_SURFACES, "all"})
    if unknown:
        raise InvalidValue(f"--inherit: unknown surface(s) {', '.join(unknown)}; choose from "
                           f"{', '.join(INHERIT_SURFACES)} or all")
    return frozenset(INHERIT_SURFACES) if "all" in names else frozenset(names)


def inherited_preferences(parent: Mapping[str, object],
                          explicit: Mapping[str, object]) -> dict[str, object]:
    """The parent's preference keys (see PREFERENCE_KEYS) that ``explicit`` (the child's
    own flags) does not set; unset (None) parent values are skipped."""
    return {key: value for key, value in parent.items()
            if key in PREFERENCE_KEYS and key not in explicit and value is not None}


LINEAGE_KEYS: frozenset[str] = frozenset({"root", "parent", "user", "base"})
"""Config keys that say where a node sits in the tree: a restored node takes its own."""


def restored_settings(raw: Mapping[str, object]) -> tuple[dict[str, object], tuple[str, ...]]:
    """The settings a node restored from a rescue commit keeps of the rescued node's
    config.json ``raw``, and the keys it cannot keep (sorted: their defaults apply).

    Kept: every schema key except the lineage ones (``LINEAGE_KEYS``: the new node's place
    decides them), unset (None) values skipped. Reset: a key whose value breaks its own
    rule or a rule between keys (every key such a rule names is reset)."""
    settings = {key: value for key, value in raw.items()
                if key in KEYS and key not in LINEAGE_KEYS and value is not None}
    reset = {key for key, value in settings.items() if validate_config({key: value})}
    for problem in validate_config({k: v for k, v in settings.items() if k not in reset}):
        reset.update(name.strip() for name in problem.split(":", 1)[0].split(","))
    return {k: v for k, v in settings.items() if k not in reset}, tuple(sorted(reset))


def fill_instructions(node_md: str, task: str) -> str:
    """``node_md`` with the body of its ``## Instructions`` section replaced by ``task``
    (up to the next ``## `` heading); without such a section one is appended. Raises
    InvalidValue for an empty task."""
    text = task.strip()
    if not text:
        raise InvalidValue("the task is empty: give the node's instructions with --task TEXT "
                           "or --task-file FILE")
    lines = normalise_newlines(node_md).split("\n")
    start = next((i for i, line in enumerate(lines)
                  if (m := _HEADING.match(line)) and m.group(1).lower() == "instructions"),
                 None)
    if start is None:
        return normalise_newlines(node_md).rstrip("\n") + f"\n\n## Instructions\n\n{text}\n"
    end = next((i for i in range(start + 1, len(lines)) if _HEADING.match(lines[i])),
               len(lines))
    tail = ["", *lines[end:]] if end < len(lines) else [""]
    return "\n".join([*lines[:start + 1], "", *text.split("\n"), *tail])


def match_step(names: Sequence[str], gate: str) -> str:
    """The step file among ``names`` that ``--gate GATE`` means: its name (``EXECUTE``,
    any case), its file name with or without ``.md``, or its number (``02``). Raises
    InvalidValue listing the steps when none or several match."""
    want = gate.strip()
    steps = [(n, m) for n in names if (m := _STEP_FILE.fullmatch(n))]
    found = [n for n, m in steps
             if want in (n, n[:-3], m.group(1)) or m.group(2).lower() == want.lower()]
    listing = ", ".join(n[:-3] for n, _ in steps) or "none"
    if len(found) == 1:
        return found[0]
    if not found:
        raise InvalidValue(f"--gate {gate}: no such step; the node's steps are {listing}")
    raise InvalidValue(f"--gate {gate} matches several steps ({', '.join(found)}); give the "
                       "file name instead")


def with_approval_gate(step_text: str) -> str:
    """``step_text`` whose frontmatter says ``requires_approval: true``: an existing
    ``requires_approval`` line is replaced, a block gains the line, a file without one
    gets a new block."""
    text = normalise_newlines(step_text)
    lines = text.split("\n")
    if lines and _FENCE.fullmatch(lines[0]):
        close = next((i for i in range(1, len(lines)) if _FENCE.fullmatch(lines[i])), None)
        if close is not None:
            inner = lines[1:close]
            kept = [line for line in inner if not _APPROVAL.fullmatch(line)]
            return "\n".join(["---", *kept, "requires_approval: true", *lines[close:]])
    return "---\nrequires_approval: true\n---\n" + text


_WAIT = re.compile(r"wait\s*:.*")


def with_children_wait(step_text: str) -> str:
    """``step_text`` whose frontmatter says ``wait: children`` (the loop holds before the
    step until every child settled): an existing ``wait`` line is replaced, a block gains
    the line, a file without one gets a new block."""
    text = normalise_newlines(step_text)
    lines = text.split("\n")
    if lines and _FENCE.fullmatch(lines[0]):
        close = next((i for i in range(1, len(lines)) if _FENCE.fullmatch(lines[i])), None)
        if close is not None:
            kept = [line for line in lines[1:close] if not _WAIT.fullmatch(line)]
            return "\n".join(["---", *kept, "wait: children", *lines[close:]])
    return "---\nwait: children\n---\n" + text


def uncommitted_warning(parent: str, sha: str, paths: Iterable[str], shown: int = 5) -> str:
    """The warning for a parent whose worktree holds uncommitted ``paths`` a child forked
    from its committed tip ``sha`` will not see (None-free: call it only with paths)."""
    items = sorted(paths)
    listing = ", ".join(items[:shown]) + (f" and {len(items) - shown} more"
                                          if len(items) > shown else "")
    return (f"{parent} has {len(items)} uncommitted change(s) the new node does not get "
            f"(it forks from the committed tip {sha[:10]}): {listing}; commit them in "
            f"{parent} first (`fractal commit MESSAGE`) if the child needs them")
