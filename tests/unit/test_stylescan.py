"""The style tests' shared scan table (``tests/stylecheck.py``): kept while its digest
matches the sources, made again when anything it was read from changes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import stylecheck


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    target = tmp_path / "stylescan.json"
    monkeypatch.setattr(stylecheck, "SCAN_CACHE", target)
    return target


def test_a_table_is_used_only_under_the_digest_it_was_made_for(cache: Path) -> None:
    table = {"fractal/x.py": {"imports": [[1, "os"]], "calls": [[2, "print"]]}}
    cache.write_text(json.dumps({"key": "abc", "files": table}))
    assert stylecheck._read_scans("abc") == table
    assert stylecheck._read_scans("other") is None
    cache.write_text("not json")
    assert stylecheck._read_scans("abc") is None


def test_the_digest_moves_with_a_file_name_or_content(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stylecheck, "ROOT", tmp_path)
    (tmp_path / "a.py").write_text("import os\n")
    (tmp_path / "b.py").write_text("import os\n")
    first = stylecheck._sources_digest(["a.py"])
    assert stylecheck._sources_digest(["a.py"]) == first
    assert stylecheck._sources_digest(["b.py"]) != first  # same text, another file
    assert stylecheck._sources_digest(["a.py", "b.py"]) != first
    (tmp_path / "a.py").write_text("import sys\n")
    assert stylecheck._sources_digest(["a.py"]) != first


def test_the_table_says_what_a_fresh_scan_says() -> None:
    path = "fractal/procs/processes.py"
    table = stylecheck._package_scans()[path]
    assert [tuple(site) for site in table["imports"]] == [
        (s.line, s.name) for s in stylecheck._imports(path, None)]
    assert [tuple(site) for site in table["calls"]] == [
        (s.line, s.name) for s in stylecheck._calls(path, None)]
