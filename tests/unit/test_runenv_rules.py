"""The pure rules of a run's kept environment and of the fractal path prompts carry:
which names a refresh changed, the notes that say so (names, never values), and the
shell word a path renders as."""

from __future__ import annotations

import pytest

from fractal.domain.runenv import EnvChange, changed, missing_note, refresh_note
from fractal.domain.variables import shell_word

KEPT = {"PATH": "/usr/bin", "ANTHROPIC_API_KEY": "sk-old", "HOME": "/home/a", "GONE": "1"}


@pytest.mark.parametrize(("new", "expected"), [
    (dict(KEPT), EnvChange()),
    ({**KEPT, "ANTHROPIC_API_KEY": "sk-new"}, EnvChange(changed=("ANTHROPIC_API_KEY",))),
    ({**KEPT, "ZED": "1", "ANTHROPIC_BASE_URL": "http://x"},
     EnvChange(added=("ANTHROPIC_BASE_URL", "ZED"))),
    ({k: v for k, v in KEPT.items() if k != "GONE"}, EnvChange(removed=("GONE",))),
    ({"PATH": "/bin", "NEW": ""}, EnvChange(added=("NEW",),
                                            removed=("ANTHROPIC_API_KEY", "GONE", "HOME"),
                                            changed=("PATH",))),
    ({**KEPT, "HOME": "/home/a"}, EnvChange()),  # the same value is no change
])
def test_a_refresh_changes_these_names(new: dict[str, str], expected: EnvChange) -> None:
    found = changed(KEPT, new)
    assert found == expected
    assert bool(found) is bool(expected.added or expected.removed or expected.changed)


@pytest.mark.parametrize(("change", "note"), [
    (EnvChange(), "main.a: environment refreshed from this shell; no variable changed"),
    (EnvChange(changed=("PATH",)), "main.a: environment refreshed from this shell: changed PATH"),
    (EnvChange(added=("B", "C"), removed=("D",), changed=("A",)),
     "main.a: environment refreshed from this shell: changed A; added B, C; removed D"),
])
def test_a_refresh_note_names_the_variables(change: EnvChange, note: str) -> None:
    assert refresh_note("main.a", change) == note


def test_no_note_ever_carries_a_value() -> None:
    new = {**KEPT, "ANTHROPIC_API_KEY": "sk-new", "TOKEN": "t0ps3cret"}
    text = refresh_note("main.a", changed(KEPT, new)) + missing_note("main.a")
    for value in (*KEPT.values(), *new.values()):
        if len(value) > 1:
            assert value not in text, value
    assert "--refresh-env" in missing_note("main.a")


@pytest.mark.parametrize(("path", "word"), [
    ("/work/repo/.venv/bin/fractal", "/work/repo/.venv/bin/fractal"),
    ("/opt/a-b_c+d@e%f=g:h,i/fractal", "/opt/a-b_c+d@e%f=g:h,i/fractal"),
    ("/home/me/my tools/bin/fractal", "'/home/me/my tools/bin/fractal'"),
    ("/tmp/it's/fractal", "'/tmp/it'\\''s/fractal'"),
    ("/tmp/$HOME/fractal", "'/tmp/$HOME/fractal'"),
    ("/tmp/caf\u00e9/fractal", "'/tmp/caf\u00e9/fractal'"),
    ("", "''"),
])
def test_the_fractal_path_renders_as_one_shell_word(path: str, word: str) -> None:
    assert shell_word(path) == word
