"""Every agent launch reaches the fractal its loop belongs to by an absolute path: the
seeded prompts spell each fractal command with ``$FRACTAL_BIN``, rendered to the path of
the ``fractal`` beside the supervisor's interpreter, and the agent's environment carries
the same path as ``FRACTAL_BIN`` (a login shell that resets PATH keeps both)."""

from __future__ import annotations

import re

from tests.helpers import FRACTAL_BIN
from tests.loopfakes import LoopTree, loop_tree

__all__ = ["loop_tree"]


def test_seeded_prompts_name_the_run_fractal_by_its_path(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.cli("node", "init", "seeded", "--max-iters", "1", "--no-sync")
    t.run("seeded")
    assert t.launcher.calls, t.pane()
    for call in t.launcher.calls:
        assert call.env["FRACTAL_BIN"] == FRACTAL_BIN
        assert "$FRACTAL_BIN" not in call.prompt  # rendered everywhere
        # no seeded prompt tells the agent to run a bare `fractal ...`
        assert re.findall(r"`fractal [a-z]", call.prompt) == [], call.label
    commit = next(c for c in t.launcher.calls if "(COMMIT)" in c.label)
    assert f'`{FRACTAL_BIN} commit "<summary>"`' in commit.prompt
    assert f"The fractal command (run every fractal command below by this path; a login " \
           f"shell may not find `fractal` on its PATH): `{FRACTAL_BIN}`" \
        in " ".join(commit.prompt.split())


def test_a_step_of_its_own_uses_the_variable_as_written(loop_tree: LoopTree) -> None:
    t = loop_tree
    t.node("own", {"01-A.md": 'Run `$FRACTAL_BIN pool result "${FRACTAL_BIN}"` now.'},
           "--max-iters", "1", "--no-sync")
    t.run("own")
    (call,) = t.launcher.calls
    assert f'Run `{FRACTAL_BIN} pool result "{FRACTAL_BIN}"` now.' in call.prompt
