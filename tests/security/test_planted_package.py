"""A sandboxed child's hostile agent plants a ``fractal/`` package in its worktree (at the
root and in a subdirectory it then runs ``fractal`` from) and calls a verb through the
relay. The supervisor runs the relayed verb as ``python -m fractal`` outside the sandbox,
with the agent's working directory; before ``-P`` Python put that directory first on
sys.path and imported the planted package there, outside the sandbox. Now the verb runs
the real package and the planted code never runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.security.conftest import hostile_node, read_report
from tests.trees import Tree

pytestmark = pytest.mark.e2e

ATTACKS = """
PLANT = '''
import os
with open(MARKER, "a") as fh:
    fh.write("planted package ran in pid " + str(os.getpid()))
'''

def plant(where):
    os.makedirs(os.path.join(where, "fractal"), exist_ok=True)
    with open(os.path.join(where, "fractal", "__init__.py"), "w") as fh:
        fh.write(PLANT.replace("MARKER", repr(FACTS["marker"])))
    with open(os.path.join(where, "fractal", "__main__.py"), "w") as fh:
        fh.write("print('planted main ran')\\n")
    return where

def relayed(where):
    proc = subprocess.run([os.environ["FRACTAL_BIN"], "node", "status"], cwd=where,
                          capture_output=True, text=True, timeout=60)
    return f"exit {proc.returncode}: {proc.stdout[-200:]} {proc.stderr[-200:]}"

attempt("plant_root", lambda: plant("."))
attempt("plant_sub", lambda: plant("hxdir"))
attempt("relay_root", lambda: relayed("."))
attempt("relay_sub", lambda: relayed("hxdir"))
"""


def test_a_planted_fractal_package_never_runs_outside_the_sandbox(
        sandboxed_tree: Tree, tmp_path: Path) -> None:
    tree = sandboxed_tree
    marker = tmp_path / "planted-ran"
    report_path = hostile_node(tree, tmp_path, ATTACKS, {"marker": str(marker)})
    tree.cli("node", "start", "a.b")
    assert tree.wait_settled("a.b", timeout=300) == "completed"
    report = read_report(report_path)
    for attack in ("plant_root", "plant_sub", "relay_root", "relay_sub"):
        assert report[attack]["ok"] is True, (attack, report[attack])
    # the relayed verb ran fractal's own status, not the planted __main__
    for attack in ("relay_root", "relay_sub"):
        assert "planted main ran" not in str(report[attack]["detail"]), report[attack]
    assert not marker.exists(), marker.read_text()
