"""The overrides fractal's git runs under (``workspace.gitguard``): which drivers a
repository's config names, however it spells them, and how the environment carries the
overrides."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from fractal.errors import GitError
from fractal.workspace import gitguard
from fractal.workspace.git import git_env, run_git


def _repo(tmp_path: Path, config: str) -> Path:
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    with open(repo / ".git" / "config", "a", encoding="utf-8") as fh:
        fh.write(config)
    return repo


def _drivers(repo: Path) -> set[str]:
    return {key.rsplit(".", 1)[0] for key, _ in gitguard.driver_overrides(repo)}


@pytest.mark.parametrize(("config", "expected"), [
    pytest.param('[filter "lfs"]\n\tclean = x\n', {"filter.lfs"}, id="filter"),
    pytest.param('[diff "evil"]\n\ttextconv = x\n[merge "m"]\n\tdriver = y\n',
                 {"diff.evil", "merge.m"}, id="diff-and-merge"),
    pytest.param('[FILTER "Up"]\n\tclean = x\n', {"filter.Up"}, id="section-case"),
    pytest.param("[filter.old]\n\tclean = x\n", {"filter.old"}, id="old-syntax"),
    pytest.param('[core] [filter "same-line"] clean = x\n', {"filter.same-line"},
                 id="second-header-on-a-line"),
    pytest.param('  [ filter   "spaced" ]\n', {"filter.spaced"}, id="spaces"),
    pytest.param('[filter "a\\"b"]\n', {'filter.a"b'}, id="escaped-quote"),
    pytest.param("[core]\n\tbare = false\n", set(), id="none"),
])
def test_drivers_named_in_the_repository_config(tmp_path: Path, config: str,
                                                expected: set[str]) -> None:
    assert _drivers(_repo(tmp_path, config)) == expected


def test_drivers_in_included_files_are_found(tmp_path: Path) -> None:
    (tmp_path / "more.cfg").write_text('[diff "inc"]\n\tcommand = x\n[include]\n'
                                       '\tpath = deeper.cfg\n')
    (tmp_path / "deeper.cfg").write_text('[filter "deep"]\n\tsmudge = x\n')
    repo = _repo(tmp_path, f'[includeIf "gitdir:/nowhere/"]\n\tpath = "{tmp_path}/more.cfg"\n')
    assert _drivers(repo) == {"diff.inc", "filter.deep"}


# Each form below is an include git itself follows (checked with `git config` first):
# the review's case 7 was the first, a key written on its section header's line.
@pytest.mark.parametrize("include", [
    pytest.param("[include] path = {cfg}\n", id="key-on-the-header-line"),
    pytest.param('[includeIf "gitdir:/"] path = {cfg}\n', id="includeif-on-the-header-line"),
    pytest.param("[INCLUDE]\n\tPATH = {cfg}\n", id="upper-case"),
    pytest.param("[include]\n\tpath = {head}\\\n{tail}\n", id="continuation-line"),
    pytest.param('[include]\n\tpath = "{head}"{tail}\n', id="partly-quoted"),
    pytest.param('[include]\n\tpath = {cfg} ; a comment\n', id="trailing-comment"),
    pytest.param('[core] [include] path = "{cfg}" # x\n', id="third-on-a-line"),
])
def test_every_spelling_of_an_include_is_followed(tmp_path: Path, include: str) -> None:
    cfg = str(tmp_path / "inc.cfg")
    (tmp_path / "inc.cfg").write_text('[filter "evil"]\n\tclean = cat\n')
    repo = _repo(tmp_path, include.format(cfg=cfg, head=cfg[:5], tail=cfg[5:]))
    seen = subprocess.run(["git", "-C", str(repo), "config", "filter.evil.clean"],
                          capture_output=True, text=True, check=False).stdout.strip()
    assert seen == "cat"  # git reads the include
    assert _drivers(repo) == {"filter.evil"}


def test_an_included_filter_does_not_run_under_a_guarded_add(tmp_path: Path) -> None:
    """The review's case 7 end to end: the include on its header's line held a filter
    that a guarded ``git add`` ran."""
    pwned = tmp_path / "pwned"
    (tmp_path / "inc.cfg").write_text(f'[filter "evil"]\n\tclean = "touch {pwned}; cat"\n')
    repo = _repo(tmp_path, f"[include] path = {tmp_path / 'inc.cfg'}\n")
    (repo / ".gitattributes").write_text("* filter=evil\n")
    (repo / "f").write_text("x\n")
    run_git(["add", "f", ".gitattributes"], repo)
    assert not pwned.exists()


@pytest.mark.parametrize("config", [
    pytest.param('\ufeff[filter "evil"]\n\tclean = "touch {pwned}; cat"\n', id="bom"),
    pytest.param("\ufeff[include] path = {inc}\n", id="bom-before-an-include"),
])
def test_a_filter_after_a_byte_order_mark_does_not_run(tmp_path: Path, config: str) -> None:
    """The fourth review's case 5: git skips a UTF-8 byte-order mark opening a config file;
    the scanner read it as part of the first line and missed the header there."""
    pwned = tmp_path / "pwned"
    (tmp_path / "inc.cfg").write_text(f'[filter "evil"]\n\tclean = "touch {pwned}; cat"\n')
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    head = (repo / ".git" / "config").read_text(encoding="utf-8")
    body = config.format(pwned=pwned, inc=tmp_path / "inc.cfg")
    (repo / ".git" / "config").write_text(body + head, encoding="utf-8")
    seen = subprocess.run(["git", "-C", str(repo), "config", "filter.evil.clean"],
                          capture_output=True, text=True, check=False).stdout.strip()
    assert seen.startswith("touch ")  # git reads past the mark
    (repo / ".gitattributes").write_text("* filter=evil\n")
    (repo / "f").write_text("x\n")
    run_git(["add", "f", ".gitattributes"], repo)
    assert not pwned.exists()


@pytest.mark.parametrize("where", ["config", "include"])
def test_a_config_file_past_the_read_cap_stops_every_guarded_git(tmp_path: Path,
                                                                  where: str) -> None:
    """The fourth review's case 5: a filter defined past the 1 MiB the scanner reads ran.
    Now no guarded git runs at all, and the refusal says why and what to do."""
    pwned = tmp_path / "pwned"
    long = "#" * (gitguard.CONFIG_CAP + 10) + f'\n[filter "evil"]\n\tclean = "touch {pwned}; cat"\n'
    if where == "include":
        (tmp_path / "inc.cfg").write_text(long)
        repo = _repo(tmp_path, f"[include]\n\tpath = {tmp_path / 'inc.cfg'}\n")
        big = tmp_path / "inc.cfg"
    else:
        repo = _repo(tmp_path, long)
        big = repo / ".git" / "config"
    (repo / ".gitattributes").write_text("* filter=evil\n")
    (repo / "f").write_text("x\n")
    with pytest.raises(GitError, match=f"{big} is over 1 MiB.*Shorten the file"):
        run_git(["add", "f", ".gitattributes"], repo)
    assert not pwned.exists()
    assert not subprocess.run(["git", "-C", str(repo), "ls-files"], capture_output=True,
                              text=True, check=True).stdout  # nothing was staged


def test_an_include_that_is_a_fifo_is_not_waited_on(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    repo = _repo(tmp_path, f"[include]\n\tpath = {tmp_path}/fifo\n")
    assert _drivers(repo) == set()


def test_a_worktree_and_a_subdirectory_find_the_common_config(tmp_path: Path) -> None:
    repo = _repo(tmp_path, '[filter "x"]\n\tclean = y\n')
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=T", "-c", "user.email=t@e",
                    "commit", "-q", "--allow-empty", "-m", "i"], check=True)
    subprocess.run(["git", "-C", str(repo), "worktree", "add", "-q", "-b", "b",
                    str(tmp_path / "wt")], check=True)
    (tmp_path / "wt" / "deep").mkdir()
    assert _drivers(tmp_path / "wt" / "deep") == {"filter.x"}


def test_the_overrides_come_after_the_callers_own_and_win(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    repo = _repo(tmp_path, "[core]\n\tfsmonitor = /bin/false\n")
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "user.name")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "Operator")
    env = git_env(cwd=repo)
    assert env["GIT_CONFIG_KEY_0"] == "user.name"
    assert int(env["GIT_CONFIG_COUNT"]) == 1 + len(gitguard.FIXED)
    assert run_git(["config", "core.fsmonitor"], repo).stdout.strip() == "false"
    assert run_git(["config", "core.hooksPath"], repo).stdout.strip() == os.devnull
    assert run_git(["config", "user.name"], repo).stdout.strip() == "Operator"


def test_repository_programs_lifts_the_overrides(tmp_path: Path) -> None:
    repo = _repo(tmp_path, "[core]\n\tfsmonitor = /bin/false\n")
    with gitguard.repository_programs():
        assert run_git(["config", "core.fsmonitor"], repo).stdout.strip() == "/bin/false"
    assert run_git(["config", "core.fsmonitor"], repo).stdout.strip() == "false"


def test_every_git_fractal_starts_goes_through_git_env() -> None:
    """A new spawn point of git (outside ``run_git``) must take ``git_env``'s overrides: each
    module that writes a ``"git"`` argv lives in ``workspace/`` and builds its environment
    with ``git_env`` (the demo's scripted agent is an agent, not fractal)."""
    root = Path(__file__).resolve().parents[2] / "fractal"
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        text = path.read_text(encoding="utf-8")
        if '["git", ' not in text or rel == "demo/agent.py":
            continue
        assert rel.startswith("workspace/"), f"{rel} spawns git outside workspace/"
        assert "git_env(" in text, f"{rel} spawns git without git_env's overrides"
