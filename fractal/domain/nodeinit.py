"""What ``fractal node init`` seeds besides the packaged files: the task in NODE.md's
Instructions (``--task``), approval gates on chosen steps (``--gate``), and what a child
takes over from its parent (``--inherit``; the limits it inherits are
``domain.spawncaps``'s). Pure text and set rules; no I/O.

``--inherit`` names surfaces, comma-separated: ``steps`` (the parent's step files),
``scripts`` (its ``scripts/``), ``config`` (its preferences: agent, model, cadence and
retry settings, never a budget, cap or wall) or ``all`` (the three).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from fractal.domain.config import KEYS, validate_config
from fractal.domain.errors import InvalidValue
from fractal.domain.frontmatter import normalise_newlines

__all__ = ["INHERIT_SURFACES", "PREFERENCE_KEYS", "fill_instructions", "inherited_preferences",
           "match_step", "parse_inherit", "restored_settings", "uncommitted_warning",
           "with_approval_gate"]

INHERIT_SURFACES: tuple[str, ...] = ("steps", "scripts", "config")
"""What ``--inherit`` can copy from the parent (``all``: every one)."""

PREFERENCE_KEYS: frozenset[str] = frozenset({
    "agent", "provider", "model", "effort", "sync", "detached", "local", "step_retries",
    "step_retry_backoff", "wait", "check_timeout", "no_progress", "interval", "sleep"})
"""The config keys ``--inherit config`` copies: how the parent works, never what it may
spend (``max_cost``, ``max_iter_cost``, ``max_step_cost``, ``reserve_budget``), its time
walls and iteration count, its spawn caps, its scope, checks or lineage."""

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
