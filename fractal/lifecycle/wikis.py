"""``fractal wiki update``: regenerate wiki indexes for a directory or a node."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from fractal.errors import NotATree
from fractal.workspace.wiki import WikiUpdate, node_wikis, update_wiki

if TYPE_CHECKING:
    from fractal.lifecycle.context import Context

__all__ = ["update_wikis"]


def update_wikis(ctx: Context | None, directory: Path | None = None) -> list[WikiUpdate]:
    """Regenerate ``directory``'s index, or (None) the project wiki and memory wiki of
    the acting node (``ctx``: None when the caller is in no tree). Raises MalformedPage
    naming every malformed page, FractalError when there is no tree and no directory was
    given."""
    if directory is not None:
        return [update_wiki(directory.resolve())]

    if ctx is None:
        raise NotATree("not in a fractal tree: give a directory (`fractal wiki update DIR`)")
    paths = ctx.tree.node(ctx.acting)
    return [update_wiki(w, top=paths.worktree)
            for w in node_wikis(paths.worktree, paths.node_dir)]
