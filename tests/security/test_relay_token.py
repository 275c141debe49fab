"""Another tree's agent cannot use a node's relay: only its own tree's data dir is hidden
from a sandbox, so a socket of a second tree on the same machine is reachable (a connect
works on a read-only mount), but every request must carry the token of the node's
current launch, which only that launch's sandbox holds. The attacker drops its ``_NODE``
and points ``FRACTAL_RELAY`` at the victim's socket; on the code before the token the
victim's supervisor ran ``node done`` as the victim (its run ended, completed)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from tests.helpers import wait_until
from tests.security.conftest import hostile_node, read_report
from tests.trees import Tree, set_sandbox

pytestmark = pytest.mark.e2e

COMMANDS = """
def as_victim(*args):
    environ = {k: v for k, v in os.environ.items() if k != "_NODE"}
    environ["FRACTAL_RELAY"] = FACTS["victim_relay"]
    done = subprocess.run([sys.executable, "-m", "fractal", *args], capture_output=True,
                          text=True, env=environ, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout

attempt("reachable", lambda: os.path.exists(FACTS["victim_relay"]))
attempt("done", lambda: as_victim("node", "done"))
attempt("status", lambda: as_victim("node", "status"))
"""


def _waiting_agent(path: Path, release: Path) -> Path:
    """A command agent that waits (at most 300 s) until ``release`` exists, then ends its
    step with a zero cost: the victim's launch stays up while the attacker acts."""
    path.write_text(f"""#!{sys.executable}
import json, os, sys, time
sys.stdin.read()
deadline = time.monotonic() + 300
while not os.path.exists({str(release)!r}) and time.monotonic() < deadline:
    time.sleep(0.2)
print(json.dumps({{"type": "cost", "usd": 0.0}}))
""")
    path.chmod(0o755)
    return path


def _bwrap_lines(repo: Path) -> list[str]:
    """The command lines of the bubblewrap processes running in ``repo``'s tree."""
    lines = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        line = b" ".join(argv).decode(errors="replace")
        if Path(argv[0].decode(errors="replace")).name == "bwrap" and str(repo) in line:
            lines.append(line)
    return lines


def test_another_trees_agent_cannot_use_a_nodes_relay(
        sandboxed_tree: Tree, stub_tree_template: tuple[Path, Path], tmp_path: Path) -> None:
    tree = sandboxed_tree
    template, stub = stub_tree_template
    # the victim tree lies where the attacker's sandbox can see it (inside its repo)
    victim = Tree(repo=tree.repo / "victim", agent=stub, env=tree.env)
    shutil.copytree(template, victim.repo, symlinks=True)
    set_sandbox(victim.repo, "on")
    release = victim.repo / "release"  # the victim's agent sees its repo (read-only)
    try:
        agent = _waiting_agent(tmp_path / "waiting-agent", release)
        victim.node("v", {"01-WAIT.md": "wait"}, "--max-cost", "1", "--max-iters", "1",
                    "--no-sync", "--agent", str(agent))
        socket = victim.repo / ".fractal" / "main" / "relay" / "main.v.sock"
        facts = {"victim_relay": str(socket)}
        report_path = hostile_node(tree, tmp_path, COMMANDS, facts)
        victim.cli("node", "start", "v")
        victim.wait_running("v", timeout=120)
        wait_until(socket.exists, timeout=60, message="the victim's relay socket")
        # the token is in no command line (`ps` shows those to every user): bubblewrap
        # gets it in its own environment and hands it on
        assert wait_until(lambda: _bwrap_lines(victim.repo), timeout=60,
                          message="the victim's sandboxed launch")
        assert not [line for line in _bwrap_lines(victim.repo) if "RELAY_TOKEN" in line]
        tree.cli("node", "start", "a.b")
        assert tree.wait_settled("a.b", timeout=300) == "completed"
        report = read_report(report_path)
        release.touch()
        assert report["reachable"] == {"ok": True, "detail": "True"}  # the socket is seen
        for refused in ("done", "status"):
            assert report[refused]["ok"] is False, (refused, report[refused])
            assert "does not carry this launch's token" in str(report[refused]["detail"])
        # refused and recorded on the victim's ledger; the victim's run went on
        assert victim.sql("SELECT event, status FROM events WHERE node = 'main.v' AND "
                          "event = 'relay'") == [("relay", "failed"), ("relay", "failed")]
        assert not victim.sql("SELECT 1 FROM events WHERE event = 'done'")
        assert victim.wait_settled("v", timeout=300) in ("completed", "idle")
    finally:
        if release.parent.is_dir():
            release.touch()
        victim.kill_sessions()
