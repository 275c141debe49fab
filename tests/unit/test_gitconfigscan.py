"""The config reader gitguard uses (``workspace.gitconfigscan.parse_config``): the
drivers a config text names and the ``path`` values it holds, however git lets them be
written."""

from __future__ import annotations

import pytest

from fractal.workspace.gitconfigscan import parse_config


@pytest.mark.parametrize(("text", "drivers", "paths"), [
    pytest.param("[include] path = a.cfg\n", set(), ["a.cfg"], id="key-on-the-header-line"),
    pytest.param('[includeIf "gitdir:/x/"]path=b.cfg\n', set(), ["b.cfg"], id="no-blanks"),
    pytest.param("[include]\n\tPath = c.cfg\n", set(), ["c.cfg"], id="key-case"),
    pytest.param("[include]\n\tpath = /tm\\\np/d.cfg\n", set(), ["/tmp/d.cfg"],
                 id="continuation"),
    pytest.param('[include]\n\tpath = "/t m"p/e.cfg\n', set(), ["/t mp/e.cfg"],
                 id="partly-quoted"),
    pytest.param('[include]\n\tpath = "a\\"b\\\\c"\n', set(), ['a"b\\c'], id="escapes"),
    pytest.param("[include]\n\tpath = f.cfg ; note\n\tpath = g.cfg# x\n", set(),
                 ["f.cfg", "g.cfg"], id="comments"),
    pytest.param('[include]\n\tpath = "h;#.cfg"\n', set(), ["h;#.cfg"],
                 id="comment-characters-quoted"),
    pytest.param("# [filter \"no\"]\n; path = no.cfg\n", set(), [], id="commented-out"),
    pytest.param('[filter "evil"] clean = x\n', {("filter", "evil")}, [], id="filter"),
    pytest.param('[Diff "Up"]\n[MERGE.Old]\n', {("diff", "Up"), ("merge", "old")}, [],
                 id="section-case-and-old-syntax"),
    pytest.param('[filter "a]b\\"c"]\n', {("filter", 'a]b"c')}, [], id="bracket-in-name"),
    pytest.param('[core] [filter "two"] [diff "three"]\n',
                 {("filter", "two"), ("diff", "three")}, [], id="three-headers-on-a-line"),
    pytest.param('[core]\n\tbare = false\n\tx = "[filter \\"no\\"]"\n', set(), [],
                 id="a-header-inside-a-value"),
    pytest.param("[core]\n\t!bad line\n[filter \"after\"]\n", {("filter", "after")}, [],
                 id="garbage-line-skipped"),
    pytest.param('\ufeff[filter "bom"] clean = x\n', {("filter", "bom")}, [],
                 id="byte-order-mark-before-a-header"),
    pytest.param("\ufeff[include] path = ../inc.cfg\n", set(), ["../inc.cfg"],
                 id="byte-order-mark-before-an-include"),
    pytest.param('[core]\n\ufeff[filter "mid"]\n', set(), [],
                 id="byte-order-mark-only-at-the-start"),
])
def test_parse_config(text: str, drivers: set[tuple[str, str]], paths: list[str]) -> None:
    assert parse_config(text) == (drivers, paths)
