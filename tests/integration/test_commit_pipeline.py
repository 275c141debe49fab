"""``fractal commit`` through its library entry point (lifecycle.commit.commit_work): subjects,
lineage and the ``commit`` event, scope, lint, staging excludes, warnings, modes and push.

Real git, a real tree database, real lint scripts. ``make_node`` and ``pre_commit_node``
are shared with test_commit_robustness.py and test_wiki_plans.py.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from fractal.domain.config import coerce_value
from fractal.errors import ConfigError, FractalError, InvalidValue
from fractal.lifecycle.commit import CommitMode, CommitResult, commit_work
from fractal.lifecycle.context import open_context
from fractal.lifecycle.spawn import init_node
from fractal.lifecycle.trees import init_tree
from fractal.store.ledger import Ledger
from fractal.tree import NodePaths, Tree
from fractal.workspace.commit_stage import LARGE_FILE, staged_paths
from fractal.workspace.commit_types import LintFailed, ScopeViolation, UncommittedChanges
from tests.helpers import copy_of_tree, git, make_repo


@dataclass
class Node:
    """A tree in ``repo`` with one node that has an open run and iteration 1."""

    repo: Path
    tree: Tree
    paths: NodePaths
    run_id: int
    iter_id: int

    @property
    def wt(self) -> Path:
        return self.paths.worktree

    def commit(self, message: str | None = "add work", mode: CommitMode = CommitMode.ITERATION,
               env: Mapping[str, str] | None = None) -> CommitResult:
        return commit_work(open_context(self.wt), message, mode=mode, env=env)

    def head(self) -> str:
        return git(self.wt, "rev-parse", "HEAD")

    def subject(self, ref: str = "HEAD") -> str:
        return git(self.wt, "log", "-1", "--format=%s", ref)

    def files(self, ref: str = "HEAD") -> list[str]:
        out = git(self.wt, "diff-tree", "-r", "--root", "--no-commit-id", "--name-only", ref)
        return out.splitlines()

    def events(self) -> list[tuple[object, ...]]:
        con = sqlite3.connect(self.tree.db_path)
        try:
            return list(con.execute(
                "SELECT node, actor, status, metadata, run_id, iter_id, step_id FROM events "
                "WHERE event = 'commit' ORDER BY event_id"))
        finally:
            con.close()

    def write(self, rel: str, text: str = "x\n") -> Path:
        path = self.wt / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def lint(self, body: str) -> None:
        script = self.paths.node_dir / "scripts" / "lint.sh"
        script.write_text("#!/usr/bin/env bash\n" + body + "\n")
        git(self.wt, "add", "-A")
        git(self.wt, "commit", "-q", "--no-verify", "-m", "lint script")


def make_node(base: Path, *, scope: str | None = None, name: str = "a",
              prepare: Callable[[Path], None] | None = None) -> Node:
    """A repo (``prepare(repo)`` runs before the tree exists), a tree, a node with
    ``--scope scope`` and a run with iteration 1 open."""
    def build(repo: Path) -> None:
        make_repo(repo)
        if prepare is not None:
            prepare(repo)
        init_tree(repo)
        settings: dict[str, object] = {}
        if scope is not None:
            settings["scope"] = coerce_value("scope", scope)
        init_node(open_context(repo), name, settings)

    if prepare is None:  # the same tree every time: one build per process, then copies
        repo = copy_of_tree(base / "repo", f"commit-{name}-{scope}", build)
    else:
        repo = base / "repo"
        build(repo)
    tree = Tree(repo=repo, root="main")
    paths = tree.node(f"main.{name}")
    ledger = Ledger(tree.db_path)
    run_id = ledger.open_run(paths.branch, agent=None, max_cost=None, parent_run_id=None)
    iter_id = ledger.open_iteration(paths.branch, run_id, 1, agent=None, model=None)
    return Node(repo, tree, paths, run_id, iter_id)


PRE_COMMIT = Path(sys.executable).parent / "pre-commit"


def pre_commit_node(base: Path, script: str, files: str) -> Node:
    """``make_node`` in a repository whose pre-commit (the framework, skipped when it is
    not installed) runs one local hook: the Python ``script`` (dedented) on the staged
    files matching the regular expression ``files``."""
    pytest.importorskip("pre_commit")
    hook = base / "hook.py"
    hook.write_text(textwrap.dedent(script))
    config = textwrap.dedent(f"""\
        repos:
        - repo: local
          hooks:
          - id: test-hook
            name: test hook
            entry: {sys.executable} {hook}
            language: system
            files: {files}
        """)

    def prepare(repo: Path) -> None:
        (repo / ".pre-commit-config.yaml").write_text(config)
        git(repo, "add", ".pre-commit-config.yaml")
        git(repo, "commit", "-q", "-m", "pre-commit config")

    node = make_node(base, prepare=prepare)
    subprocess.run([str(PRE_COMMIT), "install"], cwd=node.repo, check=True,
                   capture_output=True, text=True)
    return node


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return make_node(tmp_path)


@pytest.fixture
def scoped(tmp_path: Path) -> Node:
    return make_node(tmp_path, scope="src")


# --- subject, lineage, event ----------------------------------------------------------------

def test_operator_commit_is_labelled_with_the_latest_run_and_recorded(node: Node) -> None:
    node.write("src/a.py")
    result = node.commit("add the parser skeleton")
    sha = result.outcome.sha
    assert sha == node.head()
    assert node.subject() == f"main.a: iteration {node.run_id}.1 (add the parser skeleton)"
    assert result.outcome.files == ("src/a.py",)
    assert git(node.wt, "log", "-1", "--format=%an") == "main.a"
    assert node.events() == [("main.a", "operator", "completed", sha, node.run_id,
                              node.iter_id, None)]
    assert result.event_id is not None


def test_loop_variables_give_the_lineage(node: Node) -> None:
    ledger = Ledger(node.tree.db_path)
    step_id = ledger.open_step(node=node.paths.branch, run_id=node.run_id, iter_id=node.iter_id,
                               step=1, step_name="COMMIT", agent=None, model=None,
                               session=None)
    env = {**os.environ, "RUN_ID": str(node.run_id), "ITER": "1",
           "ITER_ID": str(node.iter_id), "STEP_ID": str(step_id), "NODE_BRANCH": "main.a"}
    node.write("b.txt")
    sha = node.commit("add b", env=env).outcome.sha
    assert node.events() == [("main.a", "agent", "completed", sha, node.run_id, node.iter_id,
                              step_id)]


def test_loop_variables_of_another_node_are_ignored(node: Node) -> None:
    env = {**os.environ, "RUN_ID": "99", "ITER": "7", "ITER_ID": "", "STEP_ID": "",
           "NODE_BRANCH": "main.other"}
    node.write("c.txt")
    node.commit("add c", env=env)
    assert node.subject() == f"main.a: iteration {node.run_id}.1 (add c)"
    assert node.events()[0][1] == "operator"


@pytest.mark.parametrize("message", ["", "   ", "main.a: add x", "Main.A add x",
                                     "iteration 1.1 (x)", "Iteration work", "two\nlines"])
def test_bad_messages_are_refused(node: Node, message: str) -> None:
    node.write("d.txt")
    before = node.head()
    with pytest.raises(InvalidValue):
        node.commit(message)
    assert node.head() == before and staged_paths(node.wt) == []


def test_a_node_that_never_ran_takes_only_init(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    init_tree(repo)
    paths = init_node(open_context(repo), "fresh", {}).paths
    (paths.worktree / "e.txt").write_text("e\n")
    with pytest.raises(FractalError, match=r"no run yet.*--init"):
        commit_work(open_context(paths.worktree), "add e")
    result = commit_work(open_context(paths.worktree), "write the task", mode=CommitMode.INIT)
    assert git(paths.worktree, "log", "-1", "--format=%s") == "main.fresh: init (write the task)"
    assert result.lineage.run_id is None


def test_the_root_only_takes_the_baseline_commit(node: Node) -> None:
    (node.repo / "wiki").mkdir(exist_ok=True)  # `fractal init` made the project wiki
    (node.repo / "wiki" / "build.md").write_text("# Build\n\nRun make.\n")
    with pytest.raises(FractalError, match="root"):
        commit_work(open_context(node.repo), "add wiki")
    with pytest.raises(FractalError, match="root"):
        commit_work(open_context(node.repo), None, mode=CommitMode.CHECK)
    result = commit_work(open_context(node.repo), "baseline", mode=CommitMode.INIT)
    assert git(node.repo, "log", "-1", "--format=%s") == "main: init (baseline)"
    assert git(node.repo, "log", "-1", "--format=%an") == "Test User"
    # the root's data dir stays out, and so does the wiki's generated index
    assert result.outcome.files == ("wiki/build.md",)
    assert "- [Build](<build.md>)" in (node.repo / "wiki" / "_index.md").read_text()


def test_nothing_to_commit_is_a_noop_with_a_notice(node: Node) -> None:
    before = node.head()
    outcome = node.commit("nothing").outcome
    assert outcome.sha is None and node.head() == before
    assert any("nothing to commit" in n for n in outcome.notices)
    assert node.events() == []


# --- scope --------------------------------------------------------------------------------

def test_out_of_scope_changes_are_listed_and_nothing_is_staged(scoped: Node) -> None:
    scoped.write("src/ok.py")
    scoped.write("docs/notes.md")
    scoped.write("README.md", "changed\n")
    git(scoped.wt, "add", "README.md")
    with pytest.raises(ScopeViolation) as info:
        scoped.commit("add notes")
    assert set(info.value.paths) == {"docs/notes.md", "README.md"}
    assert "docs/notes.md" in str(info.value) and "--ignore-scope" in str(info.value)
    assert staged_paths(scoped.wt) == ["README.md"]  # only what the caller staged himself


def test_node_dir_and_wiki_are_always_in_scope(scoped: Node) -> None:
    scoped.write("src/a.py")
    scoped.write(".fractal/main.a/plans/p.md")
    scoped.write("wiki/page.md", "# Page\n\nx\n")
    files = scoped.commit("add plan and page").outcome.files
    assert set(files) == {"src/a.py", ".fractal/main.a/plans/p.md", "wiki/page.md"}
    # the wiki step indexed the new page; the generated index itself is never committed
    assert "- [Page](<page.md>)" in (scoped.wt / "wiki" / "_index.md").read_text()


def test_scope_matches_whole_segments(scoped: Node) -> None:
    scoped.write("srcs/a.py")
    with pytest.raises(ScopeViolation):
        scoped.commit("add srcs")


@pytest.mark.parametrize("spelling", ["./src", "src/", "src", " ./src/ "])
def test_scope_spellings_behave_identically(tmp_path: Path, spelling: str) -> None:
    n = make_node(tmp_path, scope=spelling)
    assert json.loads(n.paths.config_path.read_text())["scope"] == ["src"]
    n.write("src/lib/a.py")
    assert n.commit("add a").outcome.files == ("src/lib/a.py",)
    n.write("top.txt")
    with pytest.raises(ScopeViolation):
        n.commit("add top")


@pytest.mark.parametrize("spelling", ["./src", "src/"])
def test_hand_edited_scope_spellings_behave_identically(scoped: Node, spelling: str) -> None:
    config = json.loads(scoped.paths.config_path.read_text())
    scoped.paths.config_path.write_text(json.dumps({**config, "scope": [spelling]}))
    scoped.write("src/b.py")
    files = scoped.commit("add b").outcome.files
    assert set(files) == {"src/b.py", ".fractal/main.a/config.json"}


@pytest.mark.parametrize("spelling", ["/abs/src", "../elsewhere", "src/../../x"])
def test_absolute_and_parent_scopes_are_refused(scoped: Node, spelling: str) -> None:
    with pytest.raises(InvalidValue):
        coerce_value("scope", spelling)
    with pytest.raises(ConfigError):
        init_node(open_context(scoped.repo), "bad", {"scope": [spelling]})
    config = json.loads(scoped.paths.config_path.read_text())
    scoped.paths.config_path.write_text(json.dumps({**config, "scope": [spelling]}))
    with pytest.raises(InvalidValue):
        scoped.commit("add x")


def test_unscoped_node_commits_everything(node: Node) -> None:
    node.write("a/b/c.txt")
    node.write("top.txt")
    assert set(node.commit("add files").outcome.files) == {"a/b/c.txt", "top.txt"}


def test_ignore_scope_commits_out_of_scope_changes_but_still_lints(scoped: Node) -> None:
    scoped.lint('test -e "$WORKTREE_DIR/LINT_OK" || { echo "lint says no"; exit 2; }')
    scoped.write("docs/out.md")
    with pytest.raises(LintFailed, match="lint says no"):
        scoped.commit("add docs", mode=CommitMode.IGNORE_SCOPE)
    scoped.write("LINT_OK")
    files = scoped.commit("add docs", mode=CommitMode.IGNORE_SCOPE).outcome.files
    assert set(files) == {"docs/out.md", "LINT_OK"}


# --- lint ---------------------------------------------------------------------------------

def test_failing_lint_fails_the_commit_with_its_output(node: Node) -> None:
    node.lint('echo "src/a.py:1: E501 line too long"; exit 3')
    node.write("src/a.py")
    before = node.head()
    with pytest.raises(LintFailed) as info:
        node.commit("add a")
    assert "E501 line too long" in str(info.value) and "exit 3" in str(info.value)
    assert node.head() == before and staged_paths(node.wt) == []


def test_lint_runs_from_the_worktree_root_with_node_variables(node: Node) -> None:
    record = node.paths.node_dir / "tmp" / "lint.out"  # the node's scratch: it may run sandboxed
    node.lint(f'echo "$PWD|$NODE_BRANCH|$NODE_DIR" > {record}')
    node.write("src/a.py")
    assert node.commit("add a").outcome.sha
    assert record.read_text().strip() == f"{node.wt}|main.a|{node.paths.node_dir}"


def test_missing_lint_script_is_skipped(node: Node) -> None:
    (node.paths.node_dir / "scripts" / "lint.sh").unlink()
    node.write("f.txt")
    assert node.commit("add f").outcome.sha


def test_force_bypasses_scope_lint_and_hooks(scoped: Node) -> None:
    scoped.lint("exit 1")
    hook = Path(git(scoped.wt, "rev-parse", "--path-format=absolute", "--git-path", "hooks"))
    hook.mkdir(parents=True, exist_ok=True)
    (hook / "pre-commit").write_text("#!/bin/sh\necho refused by hook\nexit 1\n")
    (hook / "pre-commit").chmod(0o755)
    scoped.write("elsewhere.txt")
    with pytest.raises(FractalError):
        scoped.commit("add elsewhere", mode=CommitMode.IGNORE_SCOPE)
    result = scoped.commit("add elsewhere", mode=CommitMode.FORCE)
    assert result.outcome.files == ("elsewhere.txt",)
    assert scoped.subject() == f"main.a: iteration {scoped.run_id}.1 (add elsewhere)"


# --- staging excludes and warnings ----------------------------------------------------------

def test_runtime_artifacts_are_never_committed(node: Node) -> None:
    ndir = ".fractal/main.a"
    artifacts = [".venv/bin/python", "data/app.db", "data/app.db-wal", "data/app.db-shm",
                 f"{ndir}/tmp/scratch.txt", f"{ndir}/setup.log", f"{ndir}/.wake", ".status",
                 f"{ndir}/command.err", "src/.x.tmp"]
    for rel in artifacts:
        node.write(rel)
    git(node.wt, "add", "-f", "data/app.db")  # staged by hand: unstaged again
    node.write("src/real.py")
    assert node.commit("add real").outcome.files == ("src/real.py",)
    assert staged_paths(node.wt) == []


def test_warns_about_tracked_ignore_rules_and_large_files(node: Node) -> None:
    node.write(".gitignore", "*.log\n")
    git(node.wt, "add", ".gitignore")
    git(node.wt, "commit", "-q", "-m", "ignore logs")
    exclude = Path(git(node.wt, "rev-parse", "--path-format=absolute", "--git-common-dir"))
    with (exclude / "info" / "exclude").open("a") as fh:
        fh.write("private.txt\n")
    node.write("src/debug.log")
    node.write("private.txt")
    big = node.write("assets/big.bin")
    big.write_bytes(b"\0" * LARGE_FILE)
    outcome = node.commit("add assets").outcome
    assert outcome.sha and outcome.files == ("assets/big.bin",)
    text = "\n".join(outcome.warnings)
    assert "src/debug.log (.gitignore:1: *.log)" in text
    assert "private.txt" not in text  # info/exclude is not a tracked rule
    assert "assets/big.bin (10.0 MB)" in text


def test_a_tool_cache_the_gitignore_ignores_on_purpose_is_no_warning(node: Node) -> None:
    node.write(".gitignore", ".pytest_cache/\n__pycache__/\n*.log\n")
    git(node.wt, "add", ".gitignore")
    git(node.wt, "commit", "-q", "-m", "ignore caches")
    node.write(".pytest_cache/v/cache/nodeids")
    node.write("src/__pycache__/m.cpython-312.pyc")
    node.write("src/m.py")
    outcome = node.commit("add m").outcome
    assert outcome.sha and outcome.files == ("src/m.py",)
    assert outcome.warnings == ()
    node.write("src/debug.log")  # a rule eating something else still warns
    node.write("src/n.py")
    assert "src/debug.log" in "\n".join(node.commit("add n").outcome.warnings)


# --- modes ----------------------------------------------------------------------------------

def test_check_reports_uncommitted_changes_and_commits_nothing(node: Node) -> None:
    assert node.commit(None, mode=CommitMode.CHECK).outcome.sha is None
    node.write("g.txt")
    node.write(".fractal/main.a/.wake")
    before = node.head()
    with pytest.raises(UncommittedChanges) as info:
        node.commit(None, mode=CommitMode.CHECK)
    assert info.value.paths == ("g.txt",)
    assert node.head() == before and staged_paths(node.wt) == []


# --- push -----------------------------------------------------------------------------------

def _origin(node: Node, tmp_path: Path) -> Path:
    bare = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(node.repo, "remote", "add", "origin", str(bare))
    return bare


def test_pushes_to_origin(node: Node, tmp_path: Path) -> None:
    bare = _origin(node, tmp_path)
    node.write("h.txt")
    outcome = node.commit("add h").outcome
    assert outcome.pushed
    assert git(bare, "rev-parse", "main.a") == outcome.sha


def test_local_node_never_pushes(node: Node, tmp_path: Path) -> None:
    bare = _origin(node, tmp_path)
    config = json.loads(node.paths.config_path.read_text())
    node.paths.config_path.write_text(json.dumps({**config, "local": True}))
    node.write("i.txt")
    outcome = node.commit("add i").outcome
    assert outcome.sha and not outcome.pushed
    assert git(bare, "for-each-ref") == ""


def test_missing_origin_is_a_notice(node: Node) -> None:
    node.write("j.txt")
    outcome = node.commit("add j").outcome
    assert outcome.sha and not outcome.pushed and not outcome.warnings
    assert "no origin remote: push skipped" in outcome.notices


def test_failed_push_is_a_warning_and_the_commit_stands(node: Node, tmp_path: Path) -> None:
    git(node.repo, "remote", "add", "origin", str(tmp_path / "missing.git"))
    node.write("k.txt")
    outcome = node.commit("add k").outcome
    assert outcome.sha == node.head() and not outcome.pushed
    assert any("push to origin failed" in w for w in outcome.warnings)
    assert node.events()[0][3] == outcome.sha


def test_a_hanging_push_is_stopped_and_the_commit_stands(node: Node, tmp_path: Path) -> None:
    """A pre-push hook that never returns (a stalled network looks the same) is stopped
    at the push time wall with its whole group: a warning, not a held step."""
    from fractal.procs.commands import run_capture
    from fractal.workspace.commit import push_branch

    bare = _origin(node, tmp_path)
    hook = Path(git(node.wt, "rev-parse", "--git-common-dir")) / "hooks" / "pre-push"
    if not hook.is_absolute():
        hook = node.wt / hook
    hook.write_text("#!/bin/sh\necho \"$$\" > \"$0.pid\"\nexec sleep 600\n")
    hook.chmod(0o755)
    node.write("m.txt")
    git(node.wt, "add", "m.txt")
    git(node.wt, "commit", "-q", "--no-verify", "-m", "m")

    def runner(argv: list[str], cwd: Path, env: Mapping[str, str],
               timeout: float | None) -> tuple[int, str]:
        return run_capture(argv, cwd=cwd, env=env, timeout=timeout, grace=0.5)

    pushed, notice, warning = push_branch(node.wt, "main.a", no_verify=False, runner=runner,
                                          timeout=1.0)
    assert not pushed and notice is None
    assert warning is not None and "push to origin timed out after 1s" in warning
    assert "the commit stands" in warning
    assert git(bare, "for-each-ref") == ""
    hook_pid = int(Path(f"{hook}.pid").read_text())
    assert not psutil.pid_exists(hook_pid) or psutil.Process(hook_pid).status() == "zombie"


def test_missing_identity_is_written_before_committing(node: Node) -> None:
    git(node.wt, "config", "--worktree", "--unset", "user.name")
    node.write("l.txt")
    outcome = node.commit("add l").outcome
    assert git(node.wt, "log", "-1", "--format=%an") == "main.a"
    assert any("authored as main.a" in n for n in outcome.notices)
