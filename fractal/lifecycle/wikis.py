"""``fractal wiki update``: regenerate wiki indexes for a directory or a node."""

from __future__ import annotations

from pathlib import Path

from fractal.workspace.wiki import WikiUpdate, node_wikis, update_wiki

__all__ = ["update_wikis"]


def update_wikis(cwd: Path, directory: Path | None = None) -> list[WikiUpdate]:
    """Regenerate ``directory``'s index, or (None) the project wiki and memory wiki of
    the node whose worktree holds ``cwd``. Raises MalformedPage naming every malformed
    page, FractalError when ``cwd`` is in no tree and no directory was given."""
    if directory is not None:
        return [update_wiki(directory.resolve())]
    from fractal.lifecycle.steer import acting_branch
    from fractal.tree import find_tree

    tree = find_tree(cwd)
    paths = tree.node(acting_branch(cwd, tree))
    return [update_wiki(w) for w in node_wikis(paths.worktree, paths.node_dir)]
