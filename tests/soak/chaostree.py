"""The tree ``make soak-tree`` runs (tests/soak/chaos.py): its shape, its step files, and
how to find its supervisors.

Three leads under the root, 30 nodes in all, every agent the soak agent
(tests/soak/agent.py):

- ``a`` and ``b``: three and two mids, each mid with two leaves (``a.m0.x``, ``a.m0.y``);
- ``c``: one leaf of its own (``c.w``) and a pool node ``c.p`` of ten items, whose ten
  workers (``c.p.i0`` ... ``c.p.i9``) fractal's dispatcher creates, starts and merges.

Leaves write journaled chunks that their backstop commits keep, some (one at least) behind
an approval gate, about half of the sibling pairs (one at least) writing the same conflict
file, some (one at least) sending radio messages to their parent. Leads and mids merge their settled children with
``--hand-back`` (the child's agent keeps its side of a handed-back conflict and concludes
the merge) and write a chunk of their own. Workers write chunks too; the pool's review
step only sleeps (it rejects nothing).
"""

from __future__ import annotations

import json
import random
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import psutil

from tests.soak.harness import SoakTree
from tests.soak.treefaults import add_node, git

MIDS = {"a": 3, "b": 2}  # lead -> its mids (two leaves each)
POOL = "c.p"
POOL_ITEMS = 10
COMMON = ("--no-sync", "--step-timeout", "5m", "--step-retry-backoff", "2s", "--wait", "10m")


@dataclass(frozen=True)
class Shape:
    """Who is who in the tree (dotted names under ``main``)."""

    leads: tuple[str, ...] = ("a", "b", "c")

    def planned(self) -> list[str]:
        """Every node ``build`` creates itself (the pool's workers aside)."""
        out: list[str] = []
        for lead in self.leads:
            out.append(lead)
            for mid in range(MIDS.get(lead, 0)):
                out += [f"{lead}.m{mid}", f"{lead}.m{mid}.x", f"{lead}.m{mid}.y"]
        return [*out, "c.w", POOL]

    def workers(self) -> list[str]:
        return [f"{POOL}.i{n}" for n in range(POOL_ITEMS)]

    def all(self) -> list[str]:
        return [*self.planned(), *self.workers()]

    @staticmethod
    def is_worker(name: str) -> bool:
        """A pool worker: its dispatcher starts it, never the operator."""
        return name.startswith(POOL + ".")

    def mergers(self) -> list[str]:
        """The nodes whose agent merges its children (leads and mids)."""
        return [n for n in self.planned() if n.count(".") < 2 and n != POOL and n != "c.w"]


def _markers(box: SoakTree, **more: object) -> str:
    words = [f"[soak:{k.replace('_', '-')}={v}]" if v != "" else f"[soak:{k}]"
             for k, v in more.items()]
    return " ".join([*words, f"[soak:usage-file={box.base / 'window-closed'}]",
                     f"[soak:quiet-file={box.base / 'quiet'}]"]) + "\n"


def build(box: SoakTree, rng: random.Random, shape: Shape) -> dict[str, int]:
    """Create the tree, a level at a time (five ``node init`` at once), then the pool under
    ``c``; returns what it made ({"gated": N, "conflicting pairs": N, "radio": N, ...}):
    at least one gated leaf, one sibling pair writing the same conflict file and one leaf
    sending radio messages."""
    made = {"gated": 0, "conflicting pairs": 0, "radio": 0}
    leaves = [n for n in shape.planned() if n not in shape.mergers() and n != POOL]
    mids = sorted({n.rsplit(".", 1)[0] for n in leaves if n.count(".") == 2})
    clash = {m for i, m in enumerate(mids) if i == 0 or rng.random() < 0.5}  # one at least
    gated = {leaves[0], *(n for n in leaves[1:] if rng.random() < 0.3)}
    radio = {leaves[-1], *(n for n in leaves[:-1] if rng.random() < 0.4)}
    made["conflicting pairs"] = len(clash)
    plans: dict[str, tuple[dict[str, str], tuple[str, ...]]] = {}
    for name in shape.mergers():
        body = _markers(box, **{"merge-children": "", "chunks": 1, "pace": 0.5,
                                "sleep": rng.randint(3, 8)})
        plans[name] = ({"01-MERGE.md": body}, (*COMMON, "--sleep", "3s"))
    for name in leaves:
        extra: dict[str, object] = {"chunks": rng.randint(1, 4), "pace": 1}
        if name.rsplit(".", 1)[0] in clash:
            extra["conflict"] = name.rsplit(".", 1)[0]
        if name in radio:
            extra["radio"] = 1
            made["radio"] += 1
        steps = {"01-WORK.md": _markers(box, **extra)}
        if name in gated:
            steps["02-REVIEW.md"] = "---\nrequires_approval: true\n---\n" + _markers(
                box, chunks=1, pace=0.2)
            made["gated"] += 1
        plans[name] = (steps, (*COMMON, "--sleep", f"{rng.randint(2, 6)}s",
                               "--max-iters", str(rng.randint(2, 6))))
    box.cli("node", "config", "set", "max_depth=3")  # the root allows two levels by default
    with ThreadPoolExecutor(5) as pool:
        for depth in range(3):
            level = [n for n in plans if n.count(".") == depth]
            list(pool.map(lambda n: add_node(box, n, plans[n][0], *plans[n][1]), level))
    make_pool(box)
    made["pool items"] = POOL_ITEMS
    return made


def make_pool(box: SoakTree) -> None:
    """``fractal node pool p`` under ``c`` (ten items, three workers at a time), its review
    and worker steps replaced by the soak agent's markers, committed on its branch."""
    items = box.base / "pool-items.jsonl"
    items.write_text("".join(json.dumps({"id": f"i{n}", "input": f"item {n}"}) + "\n"
                             for n in range(POOL_ITEMS)))
    brief = box.base / "pool-brief.md"
    brief.write_text("Do your item.\n")
    lead, _, name = POOL.rpartition(".")
    box.cli("node", "pool", name, "--items", str(items), "--brief", str(brief),
            "--max-workers", "3", "--step-retry-backoff", "2s", "--path", str(box.worktree(lead)))
    ndir = box.node_dir(POOL)
    (ndir / "steps" / "01-REVIEW.md").write_text(_markers(box, sleep=1))
    (ndir / "worker-steps" / "00-WORK.md").write_text(_markers(box, chunks=2, pace=1))
    git(box.worktree(POOL), "add", "-A")
    git(box.worktree(POOL), "commit", "-q", "-m", "test setup", "--no-verify")


def supervisors(repo: Path) -> list[psutil.Process]:
    """The live supervisors of the tree at ``repo`` (never another tree's)."""
    out = []
    inside = f"{repo.resolve()}/.worktrees/"
    for proc in psutil.process_iter(["cmdline", "status"]):
        words = proc.info["cmdline"] or []
        if proc.info["status"] == psutil.STATUS_ZOMBIE or "_run" not in words:
            continue
        if "--path" in words and words[-1] != "--path" and \
                words[words.index("--path") + 1].startswith(inside):
            out.append(proc)
    return out


def supervised(proc: psutil.Process) -> str:
    """The branch a supervisor runs (its worktree's name, after ``--path``)."""
    words = proc.cmdline()
    return Path(words[words.index("--path") + 1]).name


def overlaps(a: str, b: str) -> bool:
    """Two dotted names whose subtrees share a node (one is the other or its ancestor)."""
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")
