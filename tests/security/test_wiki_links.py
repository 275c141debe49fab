"""Attack (the review's case 5): inside its sandbox, an agent replaces its worktree's
``wiki`` with a symbolic link to a directory it cannot write (the main checkout's
``docs``), then runs ``fractal commit``. The relayed verb runs outside the sandbox; its
wiki step regenerated ``_index.md`` through the link, into the main checkout. fractal
never writes through a symbolic link in a worktree: the commit is refused, saying why
(docs/security.md, "Symbolic links in a worktree")."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import git
from tests.security.conftest import hostile_node, read_report
from tests.trees import Tree

pytestmark = pytest.mark.e2e

LINK = """
def link_and_commit():
    shutil.rmtree("wiki", ignore_errors=True)
    if os.path.lexists("wiki"):
        os.unlink("wiki")
    os.symlink(FACTS["docs"], "wiki")
    with open("x.txt", "w") as fh:
        fh.write("x\\n")
    out = subprocess.run([os.environ.get("FRACTAL_BIN", "fractal"), "commit", "wiki link"],
                         capture_output=True, text=True)
    return f"rc={out.returncode} {out.stdout} {out.stderr}"
import shutil
attempt("commit", link_and_commit)
"""


def test_a_wiki_link_never_has_an_index_written_through_it(sandboxed_tree: Tree,
                                                          tmp_path: Path) -> None:
    tree = sandboxed_tree
    docs = tree.repo / "docs"
    docs.mkdir()
    (docs / "guide.md").write_text("# Guide\n\nhello\n")
    report_path = hostile_node(tree, tmp_path, LINK, {"docs": str(docs)})
    head = git(tree.repo, "rev-parse", "main.a.b")
    tree.cli("node", "start", "a.b")
    tree.wait_settled("a.b", timeout=300)
    said = str(read_report(report_path)["commit"]["detail"])
    assert not (docs / "_index.md").exists(), said
    assert sorted(p.name for p in docs.iterdir()) == ["guide.md"]
    assert "rc=0" not in said
    assert "is a symbolic link" in said and "never writes through one" in said, said
    assert git(tree.repo, "log", "--format=%s", f"{head}..main.a.b").count("wiki link") == 0
