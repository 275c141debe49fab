"""Rewrite module paths of the old flat ``domain/`` and ``lifecycle/`` to their regrouped homes.

Usage: ``python scripts/regroup_imports.py FILE...`` rewrites each file in place and prints
the ones it changed. A branch written against the flat layout is brought to the grouped one
by running it over the branch's changed files (``git diff --name-only main...``); running it
twice changes nothing the second time.

What it rewrites, for every moved module (``MOVES``, old dotted name -> new dotted name):

- dotted names, with or without the ``fractal.`` prefix: ``fractal.domain.usage`` and
  ``fractal.domain.usage.UsageWindow`` (an attribute, as in a ``mock.patch`` string) and
  ````domain.usage```` in prose; a name already under its new package is left alone;
- ``from fractal.domain import budget`` (a module imported by name from its package):
  one ``from fractal.domain.budget import ceilings as budget`` per moved name;
- file paths, with or without the ``fractal/`` prefix: ``fractal/domain/usage.py``,
  ``domain/usage.py`` and ``domain/outcome.decide_run_end`` (a module-qualified name in prose).

Where a new package has an old module's name (``domain/usage.py`` became
``domain/usage/windows.py``), a name is taken as new when what follows the package is one of
its new submodules; no old module had an attribute of such a name (checked when the map was
written), so the two readings never meet.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

# Old module (under fractal.) -> new module (under fractal.).
MOVES: dict[str, str] = {
    # domain/: the attention inbox's rules and facts
    "domain.attention": "domain.attention.rules",
    "domain.attention_facts": "domain.attention.facts",
    "domain.attention_tree": "domain.attention.tree",
    # domain/: the loop's own checks
    "domain.checks": "domain.checks.rules",
    "domain.signature": "domain.checks.signature",
    "domain.scores": "domain.checks.scores",
    "domain.progress": "domain.checks.progress",
    # domain/: usage windows and provider outages
    "domain.usage": "domain.usage.windows",
    "domain.outage": "domain.usage.outage",
    "domain.pause_at": "domain.usage.pause_at",
    # domain/: node merge
    "domain.merging": "domain.merge.rules",
    "domain.conflicts": "domain.merge.conflicts",
    # domain/: cost ceilings and prices
    "domain.budget": "domain.budget.ceilings",
    "domain.reserve": "domain.budget.reserve",
    "domain.prices": "domain.budget.prices",
    # domain/: how a run ends
    "domain.outcome": "domain.run.outcome",
    "domain.reasons": "domain.run.reasons",
    "domain.walls": "domain.run.walls",
    "domain.failstreak": "domain.run.failstreak",
    "domain.failcause": "domain.run.failcause",
    "domain.stopcause": "domain.run.stopcause",
    "domain.subtree": "domain.run.subtree",
    "domain.runenv": "domain.run.env",
    # domain/: what a terminal or the dashboard shows
    "domain.activity_view": "domain.views.activity",
    "domain.dashview": "domain.views.dashboard",
    "domain.treedraw": "domain.views.treedraw",
    # domain/: what the agent's prompt is made of
    "domain.render": "domain.prompt.render",
    "domain.variables": "domain.prompt.variables",
    "domain.digest": "domain.prompt.digest",
    # domain/: step files
    "domain.steps": "domain.steps.files",
    "domain.frontmatter": "domain.steps.frontmatter",
    "domain.waits": "domain.steps.waits",
    # domain/: the agent CLIs' homes, errors and launch markers
    "domain.agent_errors": "domain.agent.errors",
    "domain.agenthomes": "domain.agent.homes",
    "domain.markers": "domain.agent.markers",
    # lifecycle/: node merge and what it reads
    "lifecycle.merge": "lifecycle.merge.squash",
    "lifecycle.mergefacts": "lifecycle.merge.facts",
    "lifecycle.mergelanding": "lifecycle.merge.landing",
    "lifecycle.mergenotes": "lifecycle.merge.notes",
    "lifecycle.mergetarget": "lifecycle.merge.target",
    "lifecycle.conflicts": "lifecycle.merge.conflicts",
    "lifecycle.diff": "lifecycle.merge.diff",
    # lifecycle/: steering a running tree
    "lifecycle.steer": "lifecycle.steering.signal",
    "lifecycle.brake": "lifecycle.steering.brake",
    "lifecycle.latch": "lifecycle.steering.latch",
    "lifecycle.resume": "lifecycle.steering.resume",
    "lifecycle.kill": "lifecycle.steering.kill",
    "lifecycle.retune": "lifecycle.steering.retune",
    # lifecycle/: the cleanup verbs
    "lifecycle.cleanup": "lifecycle.cleanup.targets",
    "lifecycle.retire": "lifecycle.cleanup.retire",
    "lifecycle.delete": "lifecycle.cleanup.delete",
    "lifecycle.teardown": "lifecycle.cleanup.teardown",
    # lifecycle/: the read verbs
    "lifecycle.reads": "lifecycle.reads.nodes",
    "lifecycle.follow": "lifecycle.reads.follow",
    "lifecycle.checkreport": "lifecycle.reads.checks",
    "lifecycle.spending": "lifecycle.reads.spending",
    # lifecycle/: starting a supervisor
    "lifecycle.start": "lifecycle.start.node",
    "lifecycle.continuing": "lifecycle.start.continuing",
    "lifecycle.treestart": "lifecycle.start.subtree",
    "lifecycle.startcheck": "lifecycle.start.preflight",
    "lifecycle.host": "lifecycle.start.hosting",
}


def _submodules() -> dict[str, set[str]]:
    """New package (``domain.usage``) -> the names of its submodules (``windows``, ...)."""
    subs: dict[str, set[str]] = {}
    for new in MOVES.values():
        package, _, name = new.rpartition(".")
        subs.setdefault(package, set()).add(name)
    return subs


SUBMODULES = _submodules()
_OLDS = sorted(MOVES, key=len, reverse=True)
_OLD_DOTTED = "|".join(re.escape(old) for old in _OLDS)
_OLD_PATH = "|".join(re.escape(old.replace(".", "/")) for old in _OLDS)

# `from fractal.x.y import a, b as c` (one line, a backslash continuation or a parenthesised list).
FROM_IMPORT = re.compile(
    r"(?P<head>\bfrom[ \t]+)(?P<module>fractal\.[\w.]+)(?P<mid>[ \t]+import[ \t]+)"
    r"(?P<names>\([^)]*\)|[^\n#]*(?:\\\n[^\n#]*)*)")
DOTTED = re.compile(rf"(?<![\w.])(?P<prefix>(?:fractal\.)?)(?P<old>{_OLD_DOTTED})\b"
                    rf"(?P<rest>(?:\.\w+)?)")
PATH = re.compile(rf"(?<![\w./])(?P<prefix>(?:fractal/)?)(?P<old>{_OLD_PATH})"
                  rf"(?P<rest>\.py\b|\.[A-Za-z_]\w*)")


def _is_new(layer_old: str, rest: str) -> bool:
    """True when ``layer_old`` + ``rest`` already names a module under its new package."""
    return layer_old in SUBMODULES and rest[1:] in SUBMODULES[layer_old]


def _dotted(match: re.Match[str]) -> str:
    old = match["old"]
    if _is_new(old, match["rest"]):
        return match[0]
    return f"{match['prefix']}{MOVES[old]}{match['rest']}"


def _path(match: re.Match[str]) -> str:
    old = match["old"].replace("/", ".")
    if _is_new(old, match["rest"]):
        return match[0]
    new = MOVES[old].replace(".", "/")
    return f"{match['prefix']}{new}{match['rest']}"


def _from_import(match: re.Match[str]) -> str:
    module = match["module"]
    names = match["names"]
    short = module.removeprefix("fractal.")
    if short in SUBMODULES and _names_are(names, SUBMODULES[short]):
        return match[0]
    if short in MOVES:
        return f"{match['head']}fractal.{MOVES[short]}{match['mid']}{names}"
    if short not in ("domain", "lifecycle"):
        return match[0]
    parsed = _parse_names(names)
    if parsed is None or not any(f"{short}.{name}" in MOVES for name, _ in parsed):
        return match[0]
    kept = [(n, a) for n, a in parsed if f"{short}.{n}" not in MOVES]
    moved = [(n, a) for n, a in parsed if f"{short}.{n}" in MOVES]
    indent = _indent_before(match)
    lines: list[str] = []
    if kept:
        lines.append(f"from {module} import {_join(kept)}")
    for name, alias in moved:
        package, _, sub = MOVES[f"{short}.{name}"].rpartition(".")
        lines.append(f"from fractal.{package} import {sub} as {alias or name}")
    return ("\n" + indent).join(lines)


def _indent_before(match: re.Match[str]) -> str:
    start = match.start()
    line_start = match.string.rfind("\n", 0, start) + 1
    return match.string[line_start:start]


def _names_are(names: str, allowed: set[str]) -> bool:
    parsed = _parse_names(names)
    return parsed is not None and all(name in allowed for name, _ in parsed)


def _parse_names(names: str) -> list[tuple[str, str | None]] | None:
    """``a, b as c`` -> ``[("a", None), ("b", "c")]``; None when it is not a plain list."""
    body = names.strip().removeprefix("(").removesuffix(")").replace("\\\n", " ")
    out: list[tuple[str, str | None]] = []
    for part in body.split(","):
        words = part.split()
        if not words:
            continue
        if len(words) == 1 and words[0].isidentifier():
            out.append((words[0], None))
        elif len(words) == 3 and words[1] == "as" and words[0].isidentifier():
            out.append((words[0], words[2]))
        else:
            return None
    return out


def _join(names: list[tuple[str, str | None]]) -> str:
    return ", ".join(f"{n} as {a}" if a else n for n, a in names)


def rewrite(text: str) -> str:
    """``text`` with every old module path rewritten to its new one (idempotent)."""
    pieces: list[str] = []
    last = 0
    for match in FROM_IMPORT.finditer(text):
        pieces.append(_rewrite_plain(text[last:match.start()]))
        pieces.append(_from_import(match))
        last = match.end()
    pieces.append(_rewrite_plain(text[last:]))
    return "".join(pieces)


def _rewrite_plain(text: str) -> str:
    return PATH.sub(_path, DOTTED.sub(_dotted, text))


def main(argv: list[str]) -> int:
    """Rewrite each file named in ``argv`` in place; print the changed ones; exit 0."""
    for name in argv:
        path = Path(name)
        if not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        new = rewrite(text)
        if new != text:
            path.write_text(new, encoding="utf-8")
            print(name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
