"""nodedir.py: atomic writes, locks, config.json, the exclude block, seeding."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fractal.assets import asset_root
from fractal.errors import ConfigError, FractalError
from fractal.workspace.artifacts import RUNTIME_ARTIFACTS
from fractal.workspace.git import changed_paths, common_dir
from fractal.workspace.nodedir import (
    BLOCK_BEGIN,
    BLOCK_END,
    ensure_exclude_block,
    file_lock,
    read_config,
    seed_node_dir,
    seed_root_dir,
    update_config,
    write_atomic,
)
from tests.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]


def test_write_atomic_creates_replaces_and_keeps_mode(tmp_path: Path) -> None:
    target = tmp_path / "f.txt"
    write_atomic(target, "one\n")
    assert target.read_text() == "one\n"
    target.chmod(0o640)
    write_atomic(target, b"two\n")
    assert target.read_bytes() == b"two\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    write_atomic(target, "three\n", mode=0o755)
    assert stat.S_IMODE(target.stat().st_mode) == 0o755
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.txt"]


def test_write_atomic_failure_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "adir"
    target.mkdir()
    (target / "inside").write_text("x")  # renaming a file over a non-empty dir fails
    with pytest.raises(OSError):
        write_atomic(target, "data")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir"]


def test_file_lock_times_out_naming_the_lock(tmp_path: Path) -> None:
    lock = tmp_path / "config.json.lock"
    with file_lock(lock), pytest.raises(FractalError, match=r"config\.json\.lock"), \
            file_lock(lock, timeout=0.2):
        pass
    with file_lock(lock, timeout=0.2):  # released again
        pass


def test_read_config_errors_name_the_file(tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text('{\n  "agent": "claude",\n  "max_iters": 3,,\n}\n')
    with pytest.raises(ConfigError) as info:
        read_config(cfg)
    assert str(cfg) in str(info.value)
    assert "line 3, column" in str(info.value)
    assert info.value.source == str(cfg)
    cfg.write_text("[1, 2]\n")
    with pytest.raises(ConfigError, match="JSON object"):
        read_config(cfg)
    cfg.write_bytes(b'{"a": "\xff"}')
    with pytest.raises(ConfigError, match="UTF-8"):
        read_config(cfg)
    with pytest.raises(ConfigError, match="does not exist"):
        read_config(tmp_path / "missing.json")


def test_update_config_merges_and_formats(tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    assert update_config(cfg, {"b": 1, "a": None}) == {"a": None, "b": 1}
    merged = update_config(cfg, {"c": [1, "x"], "b": 2})
    assert merged == {"a": None, "b": 2, "c": [1, "x"]}
    assert cfg.read_text() == '{\n  "a": null,\n  "b": 2,\n  "c": [\n    1,\n    "x"\n  ]\n}\n'
    assert (tmp_path / "config.json.lock").exists()
    cfg.write_text("{broken")
    with pytest.raises(ConfigError):
        update_config(cfg, {"d": 1})
    assert cfg.read_text() == "{broken"


_WRITER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from fractal.workspace.nodedir import update_config
    path, tag, count = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    for i in range(count):
        update_config(path, {f"{tag}{i}": i})
""")


def test_update_config_two_processes_lose_nothing(tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    update_config(cfg, {"seed": True})
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    procs = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(cfg), tag, "60"], env=env)
        for tag in ("p", "q")
    ]
    reads = 0

    def done() -> bool:
        nonlocal reads
        read_config(cfg)  # a reader never sees a torn file
        reads += 1
        return all(p.poll() is not None for p in procs)

    wait_until(done, timeout=60, message="writers finished")
    assert [p.returncode for p in procs] == [0, 0]
    data = read_config(cfg)
    assert len(data) == 121
    assert all(f"{t}{i}" in data for t in "pq" for i in range(60))
    assert reads > 0
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def _block(text: str) -> list[str]:
    lines = text.splitlines()
    return lines[lines.index(BLOCK_BEGIN): lines.index(BLOCK_END) + 1]


def test_exclude_block_idempotent_and_preserves_user_lines(repo: Path) -> None:
    cdir = common_dir(repo)
    exclude = cdir / "info" / "exclude"
    exclude.write_text("# user comment\n*.swp\n/build-output/")
    ensure_exclude_block(cdir)
    first = exclude.read_text()
    assert first.startswith("# user comment\n*.swp\n/build-output/\n")
    block = _block(first)
    assert "/.worktrees/" in block
    assert all(p in block for p in RUNTIME_ARTIFACTS)
    mtime = exclude.stat().st_mtime_ns
    ensure_exclude_block(cdir)
    assert exclude.read_text() == first
    assert exclude.stat().st_mtime_ns == mtime


def test_exclude_block_replaced_in_place(repo: Path) -> None:
    cdir = common_dir(repo)
    exclude = cdir / "info" / "exclude"
    exclude.write_text(f"before\n{BLOCK_BEGIN}\nold-pattern\n{BLOCK_END}\nafter\n")
    ensure_exclude_block(cdir)
    lines = exclude.read_text().splitlines()
    assert "old-pattern" not in lines
    assert lines[0] == "before" and lines[1] == BLOCK_BEGIN and lines[-1] == "after"
    assert lines.count(BLOCK_BEGIN) == 1


def test_exclude_block_unterminated_marker_keeps_user_lines(tmp_path: Path) -> None:
    cdir = tmp_path / "gitdir"
    (cdir / "info").mkdir(parents=True)
    exclude = cdir / "info" / "exclude"
    exclude.write_text(f"{BLOCK_BEGIN}\nkeep-me\n")
    ensure_exclude_block(cdir)
    text = exclude.read_text()
    assert "keep-me" in text.splitlines()
    assert text.count(BLOCK_BEGIN) == 1 and text.count(BLOCK_END) == 1


def test_exclude_block_created_when_info_missing(tmp_path: Path) -> None:
    ensure_exclude_block(tmp_path / "gitdir")
    assert BLOCK_BEGIN in (tmp_path / "gitdir" / "info" / "exclude").read_text()


def test_seed_node_dir(tmp_path: Path) -> None:
    node = tmp_path / ".fractal" / "main.parser"
    node.mkdir(parents=True)
    (node / "NODE.md").write_text("my own task\n")
    seed_node_dir(node)
    assert (node / "NODE.md").read_text() == "my own task\n"
    steps = sorted(p.name for p in (node / "steps").iterdir())
    assert steps == ["00-PREPARE.md", "01-PLAN.md", "02-EXECUTE.md", "03-REVIEW.md",
                     "04-COMMIT.md"]
    for name in ("setup.sh", "lint.sh"):
        script = node / "scripts" / name
        assert stat.S_IMODE(script.stat().st_mode) == 0o755
        assert script.read_text() == (asset_root() / "scripts" / name).read_text()
    assert (node / "plans" / ".gitkeep").is_file()
    assert not (node / "modes").exists()
    (node / "steps" / "01-PLAN.md").write_text("edited\n")
    seed_node_dir(node)
    assert (node / "steps" / "01-PLAN.md").read_text() == "edited\n"


def test_seed_root_dir_is_self_ignored(repo: Path) -> None:
    data = repo / ".fractal" / "main"
    seed_root_dir(data)
    assert (data / ".gitignore").read_text() == "*\n"
    (data / "config.json").write_text("{}\n")
    (data / "fractal.db").write_text("")
    assert changed_paths(repo) == []
    (data / ".gitignore").write_text("custom\n")
    seed_root_dir(data)
    assert (data / ".gitignore").read_text() == "custom\n"
