"""Trees and nodes through the CLI: init, node init validation, name resolution."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.conftest import Tree, run_cli
from tests.helpers import git, make_repo

# On both backends: the CLI, supervisors and agents of a tree against one ledger.
pytestmark = [pytest.mark.e2e, pytest.mark.backend]


def test_init_is_idempotent_and_writes_the_exclude_block(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r")
    first = run_cli(["init", "--agent", "claude"], repo)
    assert "initialised: tree rooted at main" in first.stderr
    again = run_cli(["init"], repo)
    assert "already initialised" in again.stderr
    config = json.loads((repo / ".fractal" / "main" / "config.json").read_text())
    assert config["user"] is True and config["root"] == "main" and config["agent"] == "claude"
    exclude = (repo / ".git" / "info" / "exclude").read_text()
    assert exclude.count("# >>> fractal >>>") == 1 and "/.worktrees/" in exclude
    # nothing of fractal's shows up in git: the project wiki's index is generated, never
    # committed (no scaffolding for the root's branch), so the next step is a node
    assert (repo / "wiki" / "_index.md").is_file()
    assert git(repo, "status", "--porcelain") == ""
    assert "next: `fractal node init NAME" in first.stderr
    assert "fractal commit --init" not in first.stderr


@pytest.mark.sqlite_only("asserts the tree's SQLite file is created")
def test_init_warns_about_an_agent_that_cannot_launch_yet(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    done = run_cli(["init", "--agent", "missing-agent-not-on-path"], repo)
    assert "warning: agent binary not found: missing-agent-not-on-path" in done.stderr
    assert "`fractal node start` will refuse until it is fixed" in done.stderr
    assert (repo / ".fractal" / "main" / "fractal.db").is_file()  # initialised all the same
    (repo / "agent.sh").write_text("#!/bin/sh\n")  # there, but not executable
    done = run_cli(["init", "--agent", "./agent.sh"], repo)
    assert "warning: agent ./agent.sh is not executable" in done.stderr


def test_init_refuses_an_agent_path_that_does_not_exist(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    out = run_cli(["init", "--agent", "./missing-agent.sh"], repo, check=False)
    assert out.returncode == 1, out.stderr
    assert "agent ./missing-agent.sh does not exist" in out.stderr
    assert "create the script" in out.stderr and "fractal init --agent" in out.stderr
    assert not (repo / ".fractal").exists()  # refused before anything was written
    run_cli(["init", "--agent", "claude"], repo)
    out = run_cli(["init", "--agent", str(tmp_path / "nowhere" / "agent")], repo, check=False)
    assert out.returncode == 1 and "does not exist" in out.stderr
    config = json.loads((repo / ".fractal" / "main" / "config.json").read_text())
    assert config["agent"] == "claude"  # the tree's setting kept


def test_a_second_init_says_what_it_restored_and_nothing_when_nothing_was_missing(
        tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r")
    run_cli(["init"], repo)
    again = run_cli(["init"], repo)
    assert "already initialised: tree rooted at main" in again.stderr
    assert "restored" not in again.stderr
    (repo / ".git" / "info" / "exclude").write_text("")
    (repo / "wiki" / "_index.md").unlink()
    repaired = run_cli(["init"], repo)
    assert "already initialised (restored: the .git/info/exclude block, wiki/_index.md): " \
        "tree rooted at main" in repaired.stderr
    assert "restored" not in run_cli(["init"], repo).stderr


def test_init_refuses_a_repository_without_commits(tmp_path: Path) -> None:
    repo = tmp_path / "empty"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    out = run_cli(["init"], repo, check=False)
    assert out.returncode == 1 and "no commits yet" in out.stderr


def test_init_refuses_detached_head_and_slashed_branch(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "d")
    git(repo, "checkout", "-q", "--detach")
    out = run_cli(["init"], repo, check=False)
    assert out.returncode == 1 and "detached" in out.stderr
    git(repo, "checkout", "-q", "-b", "feature/x")
    out = run_cli(["init"], repo, check=False)
    assert out.returncode == 1 and "'/'" in out.stderr


def test_node_init_seeds_every_file_and_key(tree: Tree) -> None:
    out = tree.cli("node", "init", "parser", "--title", "the parser", "--max-iters", "3",
                   "--step-timeout", "10m", "--no-sync", "--scope", "src,./docs/")
    assert out.stdout.strip() == "main.parser"
    ndir = tree.node_dir("parser")
    names = sorted(p.name for p in (ndir / "steps").iterdir())
    assert names == ["00-PREPARE.md", "01-PLAN.md", "02-EXECUTE.md", "03-REVIEW.md",
                     "04-COMMIT.md"]
    for section in ("## Context", "## Instructions", "## Completion Requirements"):
        assert section in (ndir / "NODE.md").read_text()
    assert (ndir / "scripts" / "setup.sh").stat().st_mode & 0o111
    config = tree.config("parser")
    assert config["max_iters"] == 3 and config["step_timeout"] == "10m"
    assert config["sync"] is False and config["scope"] == ["src", "docs"]
    assert config["timeout"] is None and config["step_retries"] == 1  # every key present
    assert git(tree.worktree("parser"), "status", "--porcelain") == ""
    assert tree.sql("SELECT node, parent, status, title FROM nodes") == [
        ("main.parser", "main", "idle", "the parser")]
    assert tree.sql("SELECT event FROM events WHERE node = 'main.parser'") == [("init",)]
    # A child of the node, from inside its worktree.
    tree.cli("node", "init", "lexer", cwd=tree.worktree("parser"))
    assert tree.sql("SELECT parent FROM nodes WHERE node = 'main.parser.lexer'") == [
        ("main.parser",)]


@pytest.mark.parametrize(("args", "message"), [
    (["--step-timeout", "10"], "step_timeout"),
    (["--timeout", "0.1s"], "timeout"),
    (["--interval", "1m", "--sleep", "1m"], "interval"),
    (["--interval", "1m", "--iter-timeout", "2m"], "iter_timeout"),
    (["--max-iters", "0"], "max_iters"),
    (["--max-step-cost", "1"], "max_cost"),
    (["--agent", "my 'agent'"], "quotes"),
])
def test_invalid_node_init_leaves_nothing_behind(tree: Tree, args: list[str],
                                                 message: str) -> None:
    out = tree.cli("node", "init", "bad", *args, check=False)
    assert out.returncode == 1, out.stderr
    assert out.stderr.startswith("Error: ") and message in out.stderr
    assert "Traceback" not in out.stderr
    assert not tree.worktree("bad").exists()
    assert git(tree.repo, "branch", "--list", "main.bad") == ""
    assert tree.sql("SELECT COUNT(*) FROM nodes") == [(0,)]


@pytest.mark.parametrize("name", ["a.b", "a-b", "", "x" * 65, "sp ace"])
def test_invalid_names_are_refused(tree: Tree, name: str) -> None:
    out = tree.cli("node", "init", name, check=False)
    assert out.returncode == 1 and "invalid node name" in out.stderr


def test_short_names_resolve_and_ambiguity_is_refused(tree: Tree) -> None:
    tree.cli("node", "init", "a")
    tree.cli("node", "init", "b")
    tree.cli("node", "init", "x", "--parent", "a")
    tree.cli("node", "init", "x", "--parent", "b")
    assert tree.cli("node", "status", "a.x").stdout.strip() == "idle"
    out = tree.cli("node", "status", "x", check=False)
    assert out.returncode == 1 and "ambiguous" in out.stderr
    assert "main.a.x" in out.stderr and "main.b.x" in out.stderr
    out = tree.cli("node", "status", "nope", check=False)
    assert out.returncode == 1 and "no node found" in out.stderr
    rows = json.loads(tree.cli("node", "list", "a", "--json").stdout)
    assert [r["node"] for r in rows] == ["main.a", "main.a.x"]
    out = tree.cli("node", "start", "main", check=False)
    assert out.returncode == 1 and "root" in out.stderr


def test_start_refuses_unless_idle_and_attach_refuses_unless_active(tree: Tree) -> None:
    tree.node("once", {"01-A.md": "x"}, "--no-sync", "--max-iters", "1")
    out = tree.cli("node", "attach", "once", check=False)
    assert out.returncode == 1 and "only an active node" in out.stderr
    tree.cli("node", "start", "once")
    assert tree.wait_settled("once") == "completed"
    out = tree.cli("node", "start", "once", check=False)
    assert out.returncode == 1 and "--continue" in out.stderr
    tree.cli("node", "start", "once", "--continue")
    assert tree.wait_settled("once") == "completed"
    runs = tree.sql("SELECT run_id, status FROM runs ORDER BY run_id")
    assert [r[1] for r in runs] == ["completed", "completed"]
    assert tree.sql("SELECT run_id, iter FROM iterations ORDER BY iter_id") == [
        (runs[0][0], 1), (runs[1][0], 1)]


def test_sleep_paces_iterations(tree: Tree) -> None:
    tree.node("paced", {"01-A.md": "x"}, "--no-sync", "--max-iters", "2", "--sleep", "2s")
    tree.cli("node", "start", "paced")
    assert tree.wait_settled("paced") == "completed"
    from fractal.store.timefmt import to_epoch

    ((end1,),) = tree.sql("SELECT ended_at FROM iterations WHERE iter = 1")
    ((start2,),) = tree.sql("SELECT started_at FROM iterations WHERE iter = 2")
    assert to_epoch(str(start2)) - to_epoch(str(end1)) >= 1.9
