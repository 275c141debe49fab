"""The suite's own scheduling: longest-first order (``tests/ordering.py``) and the
durations table regenerated from timing files (``tests/timing.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.ordering import DURATIONS, estimates, load_table, longest_first, tier_default
from tests.timing import cli_summary, durations, rename_durations, write_durations

U = "tests/unit/test_a.py"
E = "tests/e2e/test_b.py"


@pytest.mark.parametrize(("nodeid", "expected"), [
    ("tests/unit/test_x.py::test_y", 0.05),
    ("tests/integration/test_x.py::test_y[a-b]", 0.5),
    ("tests/e2e/test_x.py::TestC::test_y", 5.0),
    ("tests/agents/test_x.py::test_y", 30.0),
    ("tests/soak/test_quick.py::test_y", 30.0),
    ("tests/test_style.py::test_y", 0.5),
    ("tests/newtier/test_x.py::test_y", 0.5),
])
def test_an_unknown_module_gets_its_tiers_default(nodeid: str, expected: float) -> None:
    assert tier_default(nodeid) == expected


def test_an_unknown_test_gets_its_modules_median_else_the_default() -> None:
    table = {f"{E}::t1": 2.0, f"{E}::t2": 9.0, f"{E}::t3": 4.0, f"{U}::t1": 0.2}
    assert estimates([f"{E}::t2", f"{E}::new", f"{U}::new", "tests/unit/test_c.py::new"],
                     table) == [9.0, 4.0, 0.2, 0.05]


@pytest.mark.parametrize(("walls", "groups", "order"), [
    # longest first
    ([1.0, 3.0, 2.0], [None, None, None], [1, 2, 0]),
    # ties keep the collection order
    ([1.0, 1.0, 5.0, 1.0], [None, None, None, None], [2, 0, 1, 3]),
    # a block of shared-fixture tests stays together, placed by its longest test
    ([4.0, 1.0, 3.0, 2.0, 0.5], [None, "m", None, "m", "m"], [0, 2, 3, 1, 4]),
    # two blocks with the same longest test: the one collected first goes first
    ([2.0, 2.0, 1.0, 1.0], ["b", "a", "b", "a"], [0, 2, 1, 3]),
])
def test_longest_first(walls: list[float], groups: list[str | None], order: list[int]
                       ) -> None:
    ids = [f"{U}::t{i}" for i in range(len(walls))]
    assert longest_first(ids, groups, dict(zip(ids, walls, strict=True))) == order


def test_the_order_is_the_same_for_the_same_collection() -> None:
    ids = [f"{E}::t{i}" for i in range(50)]
    table = {nodeid: float(i % 7) for i, nodeid in enumerate(ids)}
    groups: list[str | None] = [None] * 50
    assert longest_first(ids, groups, table) == longest_first(list(ids), groups, dict(table))


def test_durations_keep_a_reruns_longest_wall_and_round_it(tmp_path: Path) -> None:
    lines = [{"test": f"{E}::t1", "wall": 1.234}, {"test": f"{U}::t1", "wall": 0.04},
             {"test": f"{E}::t1", "wall": 2.06}]
    (tmp_path / "t.jsonl.gw0").write_text("".join(json.dumps(r) + "\n" for r in lines[:2]))
    (tmp_path / "t.jsonl.gw1").write_text(json.dumps(lines[2]) + "\n")
    files = sorted(tmp_path.glob("t.jsonl*"))
    assert durations(files) == {f"{E}::t1": 2.1, f"{U}::t1": 0.0}
    target = tmp_path / "durations.json"
    assert write_durations(target, files) == 2
    assert load_table(target) == {f"{E}::t1": 2.1, f"{U}::t1": 0.0}


def test_a_moved_test_keeps_its_wall_under_its_new_id(tmp_path: Path) -> None:
    target = tmp_path / "durations.json"
    target.write_text(json.dumps({"tests": {
        "tests/e2e/test_old.py::test_a[x]": 3.0, "tests/e2e/test_old.py::test_b": 1.0,
        "tests/e2e/test_new.py::test_b": 2.0, "tests/unit/test_split.py::test_c": 0.5,
        "tests/unit/test_split.py::test_d": 0.2}}))
    moves = [("tests/unit/test_split.py::test_c", "tests/unit/test_c.py::test_c"),
             ("tests/e2e/test_old.py", "tests/e2e/test_new.py")]
    assert rename_durations(target, moves) == 3
    assert load_table(target) == {
        "tests/e2e/test_new.py::test_a[x]": 3.0, "tests/e2e/test_new.py::test_b": 2.0,
        "tests/unit/test_c.py::test_c": 0.5, "tests/unit/test_split.py::test_d": 0.2}


def test_a_missing_or_broken_table_reads_as_empty(tmp_path: Path) -> None:
    assert load_table(tmp_path / "none.json") == {}
    (tmp_path / "bad.json").write_text("{not json")
    assert load_table(tmp_path / "bad.json") == {}


def test_the_committed_table_names_real_test_modules() -> None:
    table = load_table(DURATIONS)
    assert table, f"{DURATIONS} is missing or empty"
    root = DURATIONS.parent.parent
    missing = sorted({m for m in (k.split("::", 1)[0] for k in table)
                      if not (root / m).is_file()})
    assert missing == [], f"regenerate {DURATIONS.name}: these modules are gone"


@pytest.mark.parametrize("text", [
    pytest.param("[" * 100_000, id="nested-past-the-parsers-depth"),
    pytest.param('{"tests": ' + "[" * 100_000, id="table-nested-past-the-depth"),
    pytest.param('{"tests": [1, 2]}', id="tests-not-an-object"),
    pytest.param('["tests"]', id="not-an-object"),
    pytest.param('{"tests": {"a": {"b": 1}}}', id="a-wall-not-a-number"),
])
def test_a_malformed_table_reads_as_empty_never_crashes(tmp_path: Path, text: str) -> None:
    (tmp_path / "durations.json").write_text(text)
    assert load_table(tmp_path / "durations.json") == {}


def test_a_wall_that_is_no_finite_number_of_seconds_is_left_out(tmp_path: Path) -> None:
    (tmp_path / "durations.json").write_text(
        f'{{"tests": {{"{U}::nan": NaN, "{U}::inf": Infinity, "{U}::neg": -1, '
        f'"{U}::ok": 2.5, "{U}::odd[a::b/c d]": 1}}}}')
    table = load_table(tmp_path / "durations.json")
    assert table == {f"{U}::ok": 2.5, f"{U}::odd[a::b/c d]": 1.0}
    ids = [f"{U}::nan", f"{U}::ok", f"{U}::odd[a::b/c d]"]
    assert estimates(ids, table) == [1.75, 2.5, 1.0]  # the module's median, not NaN
    assert longest_first(ids, [None] * 3, table) == [1, 0, 2]


def test_the_cli_log_sums_per_command_costliest_first(tmp_path: Path) -> None:
    log = tmp_path / "cli.log"
    calls = [(["node", "init", "a"], 0.2), (["node", "init", "b", "--max-iters", "1"], 0.3),
             (["init"], 0.1), (["--help"], 0.02)]
    log.write_text("".join(json.dumps({"argv": argv, "cpu": cpu, "test": "t"}) + "\n"
                           for argv, cpu in calls))
    rows = [line.split() for line in cli_summary([log]).splitlines()[1:]]
    assert rows == [["node", "init", "2", "0.50", "0.250"], ["init", "1", "0.10", "0.100"],
                    ["--help", "1", "0.02", "0.020"]]
