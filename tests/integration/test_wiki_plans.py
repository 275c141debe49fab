"""Wikis, plans and ``node init``'s seeding flags on real trees, through the real CLI
where the user types them: the generated index round-trips byte-identical, a malformed
page fails the commit, a hook's rewrite of an index is reverted; plan files; --task,
--gate, --inherit."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from fractal.domain.wiki import GENERATED_NOTE
from fractal.workspace.commit_types import CommitFailed
from fractal.workspace.wiki import WikiMalformed
from tests.helpers import copy_of_tree, git, make_repo
from tests.integration.test_commit_pipeline import make_node, pre_commit_node
from tests.trees import run_cli


def cli(cwd: Path, *args: str, env: dict[str, str] | None = None,
        check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = run_cli(list(args), cwd, env={**os.environ, **(env or {})}, timeout=120, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"fractal {' '.join(args)} exited {proc.returncode}\n"
                             f"{proc.stdout}\n{proc.stderr}")
    return proc


def _build(repo: Path) -> None:
    make_repo(repo)
    cli(repo, "init")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A tree (``fractal init``), made by the CLI once per test process and copied."""
    return copy_of_tree(tmp_path / "repo", "wiki-init", _build)


def test_init_creates_the_project_wiki_and_node_init_the_memory_wiki(repo: Path) -> None:
    assert (repo / "wiki" / "_index.md").read_text().startswith("# Project wiki\n")
    cli(repo, "node", "init", "lead", "--max-iters", "1")
    wt = repo / ".worktrees" / "main.lead"
    files = git(wt, "show", "--name-only", "--format=", "HEAD").splitlines()
    assert {".fractal/main.lead/memory/_index.md",
            ".fractal/main.lead/plans/.gitkeep"} <= set(files)
    # the project wiki belongs to the root branch: a node forked before it was committed
    # does not carry a copy of its own (merging it back would collide with the root's)
    assert "wiki/_index.md" not in files
    memory = (wt / ".fractal" / "main.lead" / "memory" / "_index.md").read_text()
    assert memory.startswith("# Memory of main.lead\n")
    assert git(wt, "status", "--porcelain") == ""


def test_the_project_wikis_generated_index_never_reaches_a_branch(repo: Path) -> None:
    """The README's first steps: ``fractal commit --init "project wiki"`` right after
    ``fractal init`` commits nothing (the index is generated, not project content); a
    node has its own index, commits its pages without it, and its merge brings the
    pages to ``main``, never the index."""
    head = git(repo, "rev-parse", "HEAD")
    out = cli(repo, "commit", "--init", "project wiki")
    assert "nothing to commit" in out.stderr and git(repo, "rev-parse", "HEAD") == head
    cli(repo, "node", "init", "lead", "--max-iters", "1")
    wt = repo / ".worktrees" / "main.lead"
    assert (wt / "wiki" / "_index.md").read_text().startswith("# Project wiki\n")
    (wt / "wiki" / "build.md").write_text("# Build\n\nRun `make` from the root.\n")
    cli(wt, "commit", "--init", "the build page")
    assert git(wt, "show", "--name-only", "--format=", "HEAD").split() == ["wiki/build.md"]
    assert "- [Build](<build.md>)" in (wt / "wiki" / "_index.md").read_text()
    assert git(wt, "status", "--porcelain") == ""
    cli(repo, "node", "merge", "lead")
    listed = git(repo, "ls-tree", "-r", "--name-only", "main").splitlines()
    assert "wiki/build.md" in listed and "wiki/_index.md" not in listed


def test_wiki_update_round_trips_byte_identical(repo: Path) -> None:
    wiki = repo / "wiki"
    (wiki / "build.md").write_text("# Build\n\nRun `make` from the root.\n")
    (wiki / "arch").mkdir()
    (wiki / "arch" / "parser.md").write_text("# Parser\n\n<!-- x -->\nRecursive descent.\n")
    out = cli(repo, "wiki", "update", "wiki").stdout
    assert out.strip() == str(wiki / "_index.md")
    first = (wiki / "_index.md").read_bytes()
    assert first.decode() == ("# Project wiki\n\n" + GENERATED_NOTE + "\n\n"
                              "- [Parser](<arch/parser.md>): Recursive descent.\n"
                              "- [Build](<build.md>): Run `make` from the root.\n")
    again = cli(repo, "wiki", "update", "wiki")
    assert again.stdout == "" and "up to date (2 page(s))" in again.stderr
    assert (wiki / "_index.md").read_bytes() == first
    stat = (wiki / "_index.md").stat().st_mtime_ns
    cli(repo, "wiki", "update")  # the caller's wikis: the root's project wiki
    assert (wiki / "_index.md").stat().st_mtime_ns == stat  # not even rewritten


def test_wiki_update_names_a_malformed_page(repo: Path) -> None:
    (repo / "wiki" / "notes.md").write_text("no title here\n")
    before = (repo / "wiki" / "_index.md").read_bytes()
    proc = cli(repo, "wiki", "update", "wiki", check=False)
    assert proc.returncode == 1
    assert "notes.md does not start with a title" in proc.stderr
    assert (repo / "wiki" / "_index.md").read_bytes() == before


def test_commit_runs_the_wiki_step_and_a_malformed_page_fails_it(tmp_path: Path) -> None:
    node = make_node(tmp_path)
    node.write("wiki/good.md", "# Good\n\nA page.\n")
    node.write(".fractal/main.a/memory/todo.md", "# Todo\n\nShip it.\n")
    outcome = node.commit("add pages").outcome
    assert {"wiki/good.md", ".fractal/main.a/memory/_index.md"} <= set(outcome.files)
    # both indexes regenerated; the project wiki's stays in the worktree, off the branch
    assert "wiki/_index.md" not in outcome.files
    assert "- [Good](<good.md>): A page." in (node.wt / "wiki" / "_index.md").read_text()
    assert "- [Todo](<todo.md>): Ship it." in git(
        node.wt, "show", "HEAD:.fractal/main.a/memory/_index.md")
    before = node.head()
    node.write("wiki/bad.md", "\n")
    node.write("src/a.py")
    with pytest.raises(WikiMalformed, match=r"bad\.md is empty.*nothing was committed"):
        node.commit("add more")
    assert node.head() == before


REWRITER = """\
    import sys
    for name in sys.argv[1:]:
        with open(name, "a") as handle:
            handle.write("- [Injected](<x.md>)\\n")
    sys.exit(1)
    """


def test_a_hook_rewriting_a_generated_index_is_reverted_and_fails_the_commit(
        tmp_path: Path) -> None:
    node = pre_commit_node(tmp_path, REWRITER, r"_index\.md$")
    node.write(".fractal/main.a/memory/page.md", "# Page\n\nNew knowledge.\n")
    before = node.head()
    with pytest.raises(CommitFailed) as info:  # the memory wiki's index is committed
        node.commit("add page")
    text = str(info.value)
    assert "rewrote the generated wiki index .fractal/main.a/memory/_index.md" in text
    assert "reverted" in text and "exclude" in text
    assert node.head() == before
    index = (node.wt / ".fractal" / "main.a" / "memory" / "_index.md").read_text()
    assert "Injected" not in index and "- [Page](<page.md>): New knowledge." in index


def test_plan_init_and_list(repo: Path) -> None:
    cli(repo, "node", "init", "lead", "--max-iters", "1")
    wt = repo / ".worktrees" / "main.lead"
    path = Path(cli(wt, "plan", "init", "--name", "parser-rewrite", "--iter-ref", "2.3")
                .stdout.strip())
    assert path.is_absolute() and path.parent == wt / ".fractal" / "main.lead" / "plans"
    assert path.name.endswith("-2.3-parser-rewrite.md") and path.name[8] == "T"
    assert path.read_text() == "# Parser rewrite\n\n"
    loop = {"ITER_REF": "4.1", "NODE_BRANCH": "main.lead"}
    other = Path(cli(wt, "plan", "init", "--name", "tests", "--title", "Test plan",
                     env=loop).stdout.strip())
    assert other.name.endswith("-4.1-tests.md") and other.read_text() == "# Test plan\n\n"
    none = Path(cli(wt, "plan", "init", "--name", "idle").stdout.strip())
    assert "-0.0-idle.md" in none.name  # no run yet
    rows = json.loads(cli(wt, "plan", "list", "--json").stdout)
    assert {(r["iter_ref"], r["slug"], r["title"]) for r in rows} == {
        ("2.3", "parser-rewrite", "Parser rewrite"), ("4.1", "tests", "Test plan"),
        ("0.0", "idle", "Idle")}
    assert [r["path"] for r in rows] == sorted(str(r["path"]) for r in rows)  # oldest first
    only = json.loads(cli(wt, "plan", "list", "--iter-ref", "4.1", "--json").stdout)
    assert [r["path"] for r in only] == [str(other)]
    bad = cli(wt, "plan", "init", "--name", "Bad Name", check=False)
    assert bad.returncode == 1 and "not a slug" in bad.stderr


def test_node_init_task_file_and_gates(repo: Path, tmp_path: Path) -> None:
    task = tmp_path / "task.md"
    task.write_text("Build the lexer.\n\n- tokens for strings\n")
    proc = cli(repo, "node", "init", "lex", "--max-iters", "1", "--task-file", str(task),
               "--gate", "EXECUTE", "--gate", "04")
    assert "its task is in" in proc.stderr
    assert proc.stderr.rstrip().endswith(
        "/.worktrees/main.lex/.fractal/main.lex/NODE.md; start it with "
        "`fractal node start lex`")
    ndir = repo / ".worktrees" / "main.lex" / ".fractal" / "main.lex"
    node_md = (ndir / "NODE.md").read_text()
    instructions = node_md.split("## Instructions\n", 1)[1].split("\n## ", 1)[0]
    assert instructions == "\nBuild the lexer.\n\n- tokens for strings\n"
    assert (ndir / "steps" / "02-EXECUTE.md").read_text().startswith(
        "---\nrequires_approval: true\n---\n")
    assert (ndir / "steps" / "04-COMMIT.md").read_text().startswith(
        "---\nrequires_approval: true\n---\n")
    assert "requires_approval" not in (ndir / "steps" / "01-PLAN.md").read_text()
    assert git(repo / ".worktrees" / "main.lex", "status", "--porcelain") == ""  # committed
    inline = cli(repo, "node", "init", "inl", "--max-iters", "1", "--task", "Fix bug 7.")
    assert inline.returncode == 0
    assert "\nFix bug 7.\n" in (repo / ".worktrees" / "main.inl" / ".fractal" / "main.inl"
                                / "NODE.md").read_text()
    both = cli(repo, "node", "init", "x", "--task", "a", "--task-file", str(task), check=False)
    assert both.returncode == 2 and "mutually exclusive" in both.stderr
    bad_gate = cli(repo, "node", "init", "y", "--max-iters", "1", "--gate", "DEPLOY",
                   check=False)
    assert bad_gate.returncode == 1 and "no such step" in bad_gate.stderr
    assert not (repo / ".worktrees" / "main.y").exists()  # rolled back
    assert git(repo, "branch", "--list", "main.y") == ""


def test_node_init_inherit_from_the_parents_tip(repo: Path) -> None:
    cli(repo, "node", "init", "lead", "--max-iters", "1", "--max-cost", "5", "--model", "m1",
        "--no-sync", "--step-retries", "3", "--max-children", "4")
    lead = repo / ".worktrees" / "main.lead"
    ldir = lead / ".fractal" / "main.lead"
    (ldir / "steps" / "05-EXTRA.md").write_text("# Extra\n")
    (ldir / "scripts" / "setup.sh").write_text("#!/bin/sh\necho lead setup\n")
    git(lead, "add", "-A")
    git(lead, "commit", "-q", "-m", "lead steps", "--no-verify")
    (ldir / "steps" / "01-PLAN.md").write_text("uncommitted plan edit\n")
    proc = cli(lead, "node", "init", "div", "--inherit", "all", "--max-cost", "1")
    assert "main.lead has 1 uncommitted change(s)" in proc.stderr
    assert ".fractal/main.lead/steps/01-PLAN.md" in proc.stderr
    ddir = repo / ".worktrees" / "main.lead.div" / ".fractal" / "main.lead.div"
    assert (ddir / "steps" / "05-EXTRA.md").read_text() == "# Extra\n"
    assert "uncommitted plan edit" not in (ddir / "steps" / "01-PLAN.md").read_text()
    assert (ddir / "scripts" / "setup.sh").read_text() == "#!/bin/sh\necho lead setup\n"
    assert os.access(ddir / "scripts" / "setup.sh", os.X_OK) == os.access(
        ldir / "scripts" / "setup.sh", os.X_OK)
    config = json.loads((ddir / "config.json").read_text())
    assert (config["model"], config["sync"], config["step_retries"]) == ("m1", False, 3)
    assert config["max_cost"] == 1.0 and config["max_children"] is None  # budgets, caps: own
    assert config["max_iters"] is None
    root_refused = cli(repo, "node", "init", "z", "--inherit", "steps", check=False)
    assert root_refused.returncode == 1 and "no committed steps" in root_refused.stderr
    unknown = cli(repo, "node", "init", "z", "--inherit", "skills", check=False)
    assert unknown.returncode == 1 and "unknown surface" in unknown.stderr
