"""One definition of runtime artifact: is_runtime_artifact, info/exclude and git add agree."""

from __future__ import annotations

from pathlib import Path

import pytest

from fractal.workspace.artifacts import RUNTIME_ARTIFACTS, exclude_pathspecs, is_runtime_artifact
from fractal.workspace.git import common_dir, run_git
from fractal.workspace.nodedir import ensure_exclude_block
from tests.helpers import git

CASES: list[tuple[str, bool]] = [
    (".fractal/main.parser/setup.log", True),
    (".fractal/main.parser/supervisor.log", True),
    (".fractal/main.parser/supervisor.log.1", True),
    (".fractal/main.parser/pane.log", True),
    (".fractal/main.parser/pane.log.1", True),
    (".fractal/main.parser/claude.err", True),
    (".fractal/main.parser/command.err", True),
    (".fractal/main.parser/tmp/scratch.txt", True),
    (".fractal/main.parser/tmp/err/1-2-3.err", True),
    (".fractal/main.parser/.session", True),
    (".fractal/main.parser/.wake", True),
    (".fractal/main.parser/.launch-env", True),
    (".fractal/main.parser/config.json.lock", True),
    (".fractal/main.parser/.config.json.1a2b3c.tmp", True),
    (".fractal/main/fractal.db", True),
    ("src/.notes.txt.ffee00.tmp", True),
    (".venv/lib/site.py", True),
    ("pkg/.venv/bin/python", True),
    ("data/app.db", True),
    ("app.db-wal", True),
    ("a/b.db-shm", True),
    ("x.db-journal", True),
    ("sub/.paused", True),
    (".status", True),
    (".fractal/main.parser/config.json", False),
    (".fractal/main.parser/NODE.md", False),
    (".fractal/main.parser/steps/00-PREPARE.md", False),
    (".fractal/main.parser/scripts/setup.sh", False),
    (".fractal/main.parser/plans/.gitkeep", False),
    (".fractal/a/b/setup.log", False),
    ("src/setup.log", False),
    ("src/tmp/x.txt", False),
    ("docs/notes.err", False),
    ("src/database.dbx", False),
    ("notes.tmp", False),
    ("README.md", False),
]


@pytest.mark.parametrize(("path", "expected"), CASES)
def test_is_runtime_artifact(path: str, expected: bool) -> None:
    assert is_runtime_artifact(path) is expected


@pytest.mark.parametrize(("path", "expected"), [
    (".fractal/x/tmp/", True), (".venv/", True), ("src/", False), ("", False), ("./", False),
])
def test_is_runtime_artifact_directories(path: str, expected: bool) -> None:
    assert is_runtime_artifact(path) is expected


def _populate(root: Path) -> None:
    for rel, _ in CASES:
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(rel + "\n")


def test_info_exclude_block_agrees_with_is_runtime_artifact(repo: Path) -> None:
    ensure_exclude_block(common_dir(repo))
    _populate(repo)
    paths = [rel for rel, _ in CASES]
    out = run_git(["check-ignore", "--no-index", "--", *paths], repo, check=False).stdout
    ignored = set(out.splitlines())
    assert {p for p in paths if p in ignored} == {p for p, want in CASES if want}


def test_exclude_pathspecs_stage_exactly_the_non_artifacts(repo: Path) -> None:
    (Path(common_dir(repo)) / "info" / "exclude").write_text("")
    _populate(repo)
    run_git(["add", "--all", "--", ".", *exclude_pathspecs()], repo)
    staged = set(git(repo, "diff", "--cached", "--name-only").splitlines())
    assert staged == {p for p, want in CASES if not want}


def test_every_pattern_yields_pathspecs() -> None:
    specs = exclude_pathspecs()
    assert all(s.startswith(":(top,exclude,glob)") for s in specs)
    assert len(specs) >= len(RUNTIME_ARTIFACTS)
