"""Wiki directories on disk: create one, regenerate its ``_index.md``, and keep a commit
hook from rewriting the generated index (the page rules are ``domain.wiki``'s).

Two wikis matter to a node: the shared project wiki ``wiki/`` at the worktree root
(committed with the project, so merges carry it like any file) and the node's memory
wiki ``<node_dir>/memory/`` (its own notes, committed with the node directory).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from fractal.domain.wiki import (
    INDEX_NAME,
    MalformedPage,
    Page,
    index_title,
    parse_page,
    render_index,
)
from fractal.workspace.commit_types import CommitError, CommitFailed, CommitMode
from fractal.workspace.nodedir import write_atomic

__all__ = ["PROJECT_TITLE", "WIKI_DIRNAME", "WikiLinked", "WikiMalformed", "WikiUpdate",
           "ensure_wiki", "guard_generated", "linked_part", "node_wikis", "refresh_wikis",
           "snapshot_generated", "update_wiki"]

WIKI_DIRNAME = "wiki"
"""The project wiki's directory at the worktree root."""
PROJECT_TITLE = "Project wiki"
"""The title a new project wiki's index gets."""


log = logging.getLogger(__name__)


class WikiMalformed(CommitError):
    """The commit pipeline's wiki step found a malformed page; nothing was committed."""


class WikiLinked(CommitError):
    """A wiki directory (or a directory above it in the worktree, or its ``_index.md``) is
    a symbolic link: fractal never writes through one, so the index was not regenerated
    and nothing was committed."""


def linked_part(path: Path, top: Path | None = None) -> Path | None:
    """The first of ``path`` and its parents below ``top`` (without ``top``: ``path``
    alone), outermost first, that is a symbolic link (by ``lstat``); None when there is
    none. A link in a worktree can point anywhere (the main checkout, another node's
    files): a write under it lands there, outside the worktree."""
    parts = [path]
    if top is not None:
        parts.extend(p for p in path.parents if p != top and p.is_relative_to(top))
    for part in reversed(parts):
        if os.path.islink(part):
            return part
    return None


@dataclass(frozen=True)
class WikiUpdate:
    """What ``update_wiki`` did: the ``index`` path, the number of ``pages``, and whether
    the file ``changed``."""

    index: Path
    pages: int
    changed: bool


def node_wikis(worktree: Path, node_dir: Path) -> list[Path]:
    """The wikis of a node that exist: the project wiki, then its memory wiki."""
    return [d for d in (worktree / WIKI_DIRNAME, node_dir / "memory") if d.is_dir()]


def _pages(wiki: Path) -> list[Page]:
    pages: list[Page] = []
    problems: list[str] = []
    for path in sorted(wiki.rglob("*.md")):
        rel = path.relative_to(wiki).as_posix()
        if rel == INDEX_NAME or any(part.startswith(".") for part in Path(rel).parts) \
                or not path.is_file():
            continue
        try:
            pages.append(parse_page(rel, path.read_text(encoding="utf-8")))
        except UnicodeDecodeError:
            problems.append(f"wiki page {rel} is not UTF-8 text; save it as UTF-8")
        except MalformedPage as exc:
            problems.append(str(exc))
    if problems:
        raise MalformedPage(f"{len(problems)} malformed page(s) in {wiki}: "
                            + "; ".join(problems))
    return pages


def update_wiki(wiki: Path, default_title: str = PROJECT_TITLE, *,
                top: Path | None = None) -> WikiUpdate:
    """Regenerate ``<wiki>/_index.md`` from the pages (the existing index keeps its
    title); the file is rewritten only when its bytes change. Raises WikiLinked (nothing
    read or written) when ``wiki``, a parent of it below ``top`` (default: its own
    parent) or the index is a symbolic link, MalformedPage listing every malformed page (the index is then left as
    it was), OSError."""
    index = wiki / INDEX_NAME
    link = linked_part(index, wiki.parent if top is None else top)
    if link is not None:
        raise WikiLinked(f"{link} is a symbolic link (to {os.readlink(link)}); fractal never "
                         "writes through one, so the wiki index was not regenerated and "
                         "nothing was committed. Replace the link with a real directory "
                         f"(`rm {link.name} && mkdir {link.name}`) and retry")
    old = index.read_bytes() if index.is_file() else None
    title = index_title(old.decode("utf-8", "replace") if old is not None else None,
                        default_title)
    pages = _pages(wiki)
    new = render_index(title, pages).encode("utf-8")
    if new != old:
        write_atomic(index, new)
    return WikiUpdate(index, len(pages), new != old)


def ensure_wiki(wiki: Path, title: str, *, top: Path | None = None) -> bool:
    """Create the wiki directory and its index (titled ``title``) unless the index exists;
    True when it wrote the index. A malformed page already there leaves it unwritten
    (``fractal wiki update`` reports it). A ``wiki`` that is a symbolic link (or has one
    among its parents below ``top``, or as its index) is skipped with a warning: nothing
    is created or written through it."""
    link = linked_part(wiki / INDEX_NAME, wiki.parent if top is None else top)
    if link is not None:
        log.warning("not writing the wiki index %s: %s is a symbolic link; fractal never "
                    "writes through one (replace it with a real directory)", wiki, link)
        return False
    wiki.mkdir(parents=True, exist_ok=True)
    if (wiki / INDEX_NAME).exists():
        return False
    try:
        update_wiki(wiki, title, top=top)
    except (MalformedPage, WikiLinked):
        return False
    return True


def refresh_wikis(worktree: Path, node_dir: Path, mode: CommitMode) -> list[WikiUpdate]:
    """The commit pipeline's wiki step (before lint): regenerate the index of the project
    wiki and of the node's memory wiki, those that exist. Skipped for ``--check`` and
    ``--force``. Raises WikiMalformed (nothing committed) naming every malformed page,
    WikiLinked (nothing written, nothing committed) for a wiki under a symbolic link."""
    if mode in (CommitMode.CHECK, CommitMode.FORCE):
        return []
    titles = {worktree / WIKI_DIRNAME: PROJECT_TITLE, node_dir / "memory": "Memory"}
    done: list[WikiUpdate] = []
    for wiki in node_wikis(worktree, node_dir):
        try:
            done.append(update_wiki(wiki, titles.get(wiki, PROJECT_TITLE), top=worktree))
        except MalformedPage as exc:
            raise WikiMalformed(f"{exc}; nothing was committed. Fix the page(s) and retry, "
                                "or skip the wiki step with `fractal commit --force "
                                "MESSAGE`") from None
    return done


def snapshot_generated(wikis: Iterable[Path]) -> dict[Path, bytes | None]:
    """The bytes of each wiki's generated index (None: absent), before a commit's hooks;
    a wiki that is or holds a symbolic link is left out (its index is never restored
    through the link)."""
    return {w / INDEX_NAME: ((w / INDEX_NAME).read_bytes() if (w / INDEX_NAME).is_file()
                             else None) for w in wikis if linked_part(w / INDEX_NAME, w.parent) is None}


def guard_generated(snapshot: Mapping[Path, bytes | None], worktree: Path) -> None:
    """After a failed commit's hooks ran: restore every generated index a hook rewrote
    and raise CommitFailed naming them and saying what to do; nothing when none changed."""
    rewritten: list[str] = []
    for path, before in snapshot.items():
        now = path.read_bytes() if path.is_file() else None
        if now == before:
            continue
        rewritten.append(path.relative_to(worktree).as_posix()
                         if path.is_relative_to(worktree) else str(path))
        if before is None:
            path.unlink(missing_ok=True)
        else:
            write_atomic(path, before)
    if rewritten:
        raise CommitFailed(
            f"a pre-commit hook rewrote the generated wiki index {', '.join(rewritten)}; its "
            "rewrite was reverted and nothing was committed. Generated indexes must stay "
            "byte-identical to `fractal wiki update`'s output: exclude them from the hook "
            "(e.g. `exclude: (^|/)_index\\.md$` in .pre-commit-config.yaml), then retry")
