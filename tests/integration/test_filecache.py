"""The supervisor's cache of parsed node files: a change is always read at the next call."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fractal.runtime.filecache import RACY_S, FileCache

NOW = 1_900_000_000.0  # the injected epoch clock


class Parses:
    """A parser that records each file it read."""

    def __init__(self) -> None:
        self.read: list[str] = []

    def __call__(self, path: Path, data: bytes | None) -> str:
        text = path.read_text(encoding="utf-8") if data is None else data.decode("utf-8")
        self.read.append(text)
        if text.startswith("bad"):
            raise ValueError(text)
        return text


def _write(path: Path, text: str, age: float) -> None:
    """Write ``text`` and date the file ``age`` seconds before NOW."""
    path.write_text(text, encoding="utf-8")
    os.utime(path, (NOW - age, NOW - age))


def _cache() -> FileCache:
    return FileCache(now=lambda: NOW)


def test_an_unchanged_settled_file_is_parsed_once(tmp_path: Path) -> None:
    path, parse, cache = tmp_path / "config.json", Parses(), _cache()
    _write(path, "one", age=60)
    assert [cache.get(path, parse) for _ in range(3)] == ["one"] * 3
    assert parse.read == ["one"]


@pytest.mark.parametrize("text, age", [
    ("two!", 60),   # another size
    ("two", 30),    # the same size, another modification time
    ("two", 60),    # the same size and modification time: the change time moved
])
def test_a_changed_file_is_parsed_again(tmp_path: Path, text: str, age: float) -> None:
    path, parse, cache = tmp_path / "config.json", Parses(), _cache()
    _write(path, "one", age=60)
    assert cache.get(path, parse) == "one"
    _write(path, text, age=age)
    if text == "two" and age == 60:  # ctime cannot be set: make it differ from the cached
        os.utime(path, (NOW - 60, NOW - 60))
    assert cache.get(path, parse) == text
    assert parse.read == ["one", text]


def test_a_file_inside_the_racy_window_is_read_every_time_and_parsed_when_it_changed(
        tmp_path: Path) -> None:
    """A racy stamp proves nothing: the bytes are compared instead. The same bytes keep
    the value; other bytes under the same stamp (a second write in one timestamp tick,
    made here by putting the stamp back) are parsed again."""
    path, parse = tmp_path / "steps.md", Parses()
    path.write_text("fresh", encoding="utf-8")
    st = os.stat(path)
    changed = max(st.st_mtime, st.st_ctime)
    cache = FileCache(now=lambda: changed + RACY_S / 2)
    assert cache.get(path, parse) == cache.get(path, parse) == "fresh"
    assert parse.read == ["fresh"]
    path.write_text("fixed", encoding="utf-8")  # the same size
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert cache.get(path, parse) == "fixed"
    assert parse.read == ["fresh", "fixed"]


def test_a_racy_entry_with_the_same_bytes_keeps_its_value_as_it_settles(tmp_path: Path) -> None:
    path, parse = tmp_path / "config.json", Parses()
    path.write_text("one", encoding="utf-8")
    changed = max(os.stat(path).st_mtime, os.stat(path).st_ctime)
    now = [changed]
    cache = FileCache(now=lambda: now[0])
    assert cache.get(path, parse) == "one"
    now[0] = changed + RACY_S + 1
    assert [cache.get(path, parse) for _ in range(2)] == ["one"] * 2
    assert parse.read == ["one"]


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_special_file_in_place_of_a_cached_one_is_handed_to_the_parser(
        tmp_path: Path, kind: str) -> None:
    path, parse, cache = tmp_path / "config.json", Parses(), _cache()
    _write(path, "one", age=60)
    assert cache.get(path, parse) == "one"
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    seen: list[bytes | None] = []
    assert cache.get(path, lambda p, data: seen.append(data) or "refused") == "refused"
    assert seen == [None]


def test_a_failed_parse_is_not_kept(tmp_path: Path) -> None:
    path, parse, cache = tmp_path / "config.json", Parses(), _cache()
    _write(path, "bad json", age=60)
    for _ in range(2):
        with pytest.raises(ValueError):
            cache.get(path, parse)
    assert parse.read == ["bad json", "bad json"]


def test_a_missing_file_is_asked_of_the_parser_each_time(tmp_path: Path) -> None:
    path, parse, cache = tmp_path / "config.json", Parses(), _cache()
    for _ in range(2):
        with pytest.raises(FileNotFoundError):
            cache.get(path, parse)
    _write(path, "back", age=60)
    assert cache.get(path, parse) == "back"


def test_a_replaced_file_is_a_new_file(tmp_path: Path) -> None:
    """An editor's save writes a new file and renames it over the old one."""
    path, parse, cache = tmp_path / "config.json", Parses(), _cache()
    _write(path, "one", age=60)
    assert cache.get(path, parse) == "one"
    other = tmp_path / "config.json.tmp"
    _write(other, "two", age=60)
    os.replace(other, path)
    assert cache.get(path, parse) == "two"
