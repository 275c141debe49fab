"""``fractal node list --tree``: the listing's rows drawn as a tree with status marks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from fractal.domain.views.treedraw import ASCII, UNICODE, draw_tree, glyph


def render_tree(rows: Sequence[Mapping[str, object]], *, ascii_only: bool) -> str:
    """One line per node: connectors, status mark, the branch's last segment, status,
    detail and title. The first line is always the branch the top-level nodes hang under
    (the root for the whole tree, NODE's parent for ``node list NODE``), in full and
    without a mark; every node below it is named by its last segment."""
    glyphs = ASCII if ascii_only else UNICODE
    by_branch = {str(r["node"]): r for r in rows}
    orphans = [b for b in by_branch
               if "." in b and not any(b.startswith(a + ".") for a in by_branch)]
    heads = {b.rpartition(".")[0] for b in orphans}
    branches = sorted(set(by_branch) | heads)
    lines: list[str] = []
    for line in draw_tree(branches, glyphs):
        row = by_branch.get(line.branch)
        name = line.branch if line.depth == 0 else line.branch.rpartition(".")[2]
        if row is None:
            lines.append(f"{line.prefix}{name}")
            continue
        status = str(row.get("status") or "")
        parts = [f"{line.prefix}{glyph(status, glyphs)} {name}", status]
        for key in ("detail", "title"):
            value = str(row.get(key) or "")
            if value:
                parts.append(f"- {value}" if key == "title" else f"({value})")
        lines.append("  ".join(parts))
    return "\n".join(lines)
