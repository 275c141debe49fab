"""The tree ``make night`` plays its weather against (tests/soak/night.py): 20 nodes under
``main``, the real pinned CLIs on a few, the soak agent (tests/soak/agent.py) elsewhere.

``lead`` merges its settled children each iteration, and under it:

- ``lead.cl`` and ``lead.cl2`` (Claude Code, one subscriber credential) and ``lead.cx``
  (Codex): the real CLIs against their loopback mocks, one launch an iteration;
- ``lead.a``, a mid merging ``a.x`` (a USD cap it reaches), ``a.y`` and ``a.g`` (an
  approval gate);
- ``lead.b``, a mid merging ``b.x`` and ``b.chk`` (an exit check red twice, then green:
  the fix cycle);
- ``lead.h``, a mid over the hostile agents ``h.cap``, ``h.fsm``, ``h.sib`` and ``h.fork``
  (tests/soak/hostile.py, the attacks of HOSTILE; ``h.cap`` carries a USD cap, ``h.fsm``
  an approval gate under a loose one);
- ``lead.p``, a pool of three items whose three workers fractal's dispatcher runs.

Every node's iterations are paced so the night's work ends around 80 % of it (``pace``).
"""

from __future__ import annotations

import json
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tests.agents.conftest import CODEX_FLAGS, codex_config
from tests.agents.mock_llm import MockLLM
from tests.soak.harness import SoakTree
from tests.soak.treefaults import add_node, git

REAL = {"lead.cl": "claude", "lead.cl2": "claude", "lead.cx": "codex"}
"""The nodes on a real CLI, and the credential (mock) each uses."""
CAPS = {"lead.a.x": 0.003, "lead.h.cap": 0.004}
"""Nodes given a run cap in USD (the soak agent reports 0.001 a launch)."""
HOSTILE = {"lead.h.cap": ("raise-cap",),
           "lead.h.fsm": ("fsmonitor", "hook", "disarm-gate", "self-approve"),
           "lead.h.sib": ("sibling-write", "main-write"),
           "lead.h.fork": ("fork-daemon", "delete-objects", "plant-home")}
"""The hostile nodes and the attacks each repeats every iteration (tests/soak/hostile.py)."""
HOSTILE_GATED = "lead.h.fsm"
"""The hostile node with an approval gate (its ``02-REVIEW`` step) and a loose USD cap,
which ``disarm-gate`` tries to disarm and ``self-approve`` to release itself."""
LOOSE_CAP = 1.0
"""``HOSTILE_GATED``'s ``max_cost`` (``max_iter_cost`` needs one), far above its spend."""
SIBLING = "main.lead.h.cap"
"""The worktree ``sibling-write`` writes into (beside its own)."""
POOL, POOL_ITEMS = "lead.p", 3
GATED_PACE = 4
"""A gated node's two iterations are paced as four (a fifth of the night apart): its gate
may wait for an approval until the dawn, and the sleep after it must end inside the
dawn (tests/soak/night.py, ``dawn_s``)."""
GATED, CHECKED = "lead.a.g", "lead.b.chk"
OUTAGE_BACKOFF = (5, 60)
"""The real nodes' ``outage_backoff`` and ``max_outage_backoff``, seconds."""
CHECK = 'n=$(ls "soak/$NODE_BRANCH" 2>/dev/null | wc -l); echo "have $n of 4"; test "$n" -ge 4'
"""``b.chk``'s exit check: each iteration adds a chunk file (a log the first), so it is
red after the first and second and green after the third, each red with its own
signature (no no-progress stop)."""
COMMON = ("--no-sync", "--step-timeout", "5m", "--step-retry-backoff", "2s", "--wait", "60m")


@dataclass
class NightTree:
    """The plan: node -> (steps, init options, its credential or ''), and the mock the
    Codex nodes are pointed at (their ``config.toml``)."""

    box: SoakTree
    minutes: float
    codex: MockLLM
    plans: dict[str, tuple[dict[str, str], tuple[str, ...], str]] = field(default_factory=dict)

    def names(self) -> list[str]:
        """Every node the night expects (the pool's workers included), dotted."""
        return [*self.plans, POOL, *(f"{POOL}.i{n}" for n in range(POOL_ITEMS))]

    def pace(self, iters: int) -> str:
        """The ``--sleep`` between ``iters`` iterations that ends them near 80 % of the
        night (a step of a few seconds each)."""
        return f"{max(3, int(self.minutes * 60 * 0.8 / iters) - 4)}s"

    def plan(self) -> None:
        quiet = f"[soak:quiet-file={self.box.base / 'quiet'}]"

        def soak(**marks: object) -> str:
            words = [f"[soak:{k.replace('_', '-')}={v}]" if v != "" else f"[soak:{k}]"
                     for k, v in marks.items()]
            return " ".join([*words, quiet]) + "\n"

        merge = soak(**{"merge-children": "", "chunks": 1, "pace": 0.5})
        for name in ("lead", "lead.a", "lead.b", "lead.h"):
            self.plans[name] = ({"01-MERGE.md": merge},
                                (*COMMON, "--max-iters", "5", "--sleep", self.pace(5)), "")
        for name, cli in REAL.items():
            self.plans[name] = ({"01-SAY.md": "Say hi. [mock:text]\n"},
                                ("--no-sync", "--max-iters", "6", "--sleep", self.pace(6),
                                 "--step-retries", "0", "--wait", "60m"), cli)
        for name in ("lead.a.x", "lead.a.y", "lead.b.x"):
            iters = 10 if name in CAPS else 4
            self.plans[name] = ({"01-WORK.md": soak(chunks=2, pace=1)},
                                (*COMMON, "--max-iters", str(iters), "--sleep", self.pace(iters),
                                 *_cap(name)), "")
        self.plans[GATED] = ({"01-WORK.md": soak(chunks=1, pace=1),
                              "02-REVIEW.md": "---\nrequires_approval: true\n---\n"
                                              + soak(chunks=1)},
                             (*COMMON, "--max-iters", "2", "--sleep", self.pace(GATED_PACE)),
                             "")
        self.plans[CHECKED] = ({"01-FIX.md": soak(chunks=1)},
                               (*COMMON, "--max-iters", "6", "--sleep", self.pace(4),
                                "--exit-check", CHECK, "--no-progress", "3"), "")
        for name, attacks in HOSTILE.items():  # the capped one: its cap ends it at 4 launches
            iters = 6 if name in CAPS else 4
            steps = {"01-ATTACK.md": soak(chunks=1, attack=",".join(attacks))}
            cap, pace = _cap(name), self.pace(iters)
            if name == HOSTILE_GATED:
                steps["02-REVIEW.md"] = "---\nrequires_approval: true\n---\n" + soak(chunks=1)
                cap, iters, pace = ("--max-cost", f"{LOOSE_CAP:g}"), 2, self.pace(GATED_PACE)
            self.plans[name] = (steps, (*COMMON, "--max-iters", str(iters), "--sleep", pace,
                                        *cap), "")

    def build(self, env: dict[str, str]) -> None:
        """Create the planned nodes a level at a time (four ``node init`` at once), the
        real nodes' outage back-off and Codex home set, then the pool under ``lead``."""
        self.plan()
        self.box.cli("node", "config", "set", "max_depth=3")  # the root allows two levels
        with ThreadPoolExecutor(4) as pool:
            for depth in range(3):
                level = [n for n in self.plans if n.count(".") == depth]
                list(pool.map(self._add, level))
        for name, cli in REAL.items():
            ndir = self.box.node_dir(name)
            config = json.loads((ndir / "config.json").read_text())
            config.update(outage_backoff=f"{OUTAGE_BACKOFF[0]}s",
                          max_outage_backoff=f"{OUTAGE_BACKOFF[1]}s")
            (ndir / "config.json").write_text(json.dumps(config, indent=2))
            if cli == "codex":
                (ndir / ".codex").mkdir(exist_ok=True)
                (ndir / ".codex" / "config.toml").write_text(
                    codex_config(self.codex, request_max_retries=0, stream_max_retries=0))
            git(self.box.worktree(name), "add", "-A")
            git(self.box.worktree(name), "commit", "-q", "-m", "night: the real node's "
                                                              "settings", "--no-verify")
        self._pool()

    def _add(self, name: str) -> None:
        steps, opts, cli = self.plans[name]
        agent: tuple[str, ...] = ()
        if cli == "claude":
            agent = ("--agent", "claude", "--model", "claude-opus-4-8")
        elif cli == "codex":
            agent = ("--agent", f"codex {CODEX_FLAGS}", "--model", "gpt-5.5")
        add_node(self.box, name, steps, *agent, *opts)

    def _pool(self) -> None:
        items = self.box.base / "pool-items.jsonl"
        items.write_text("".join(json.dumps({"id": f"i{n}", "input": f"item {n}"}) + "\n"
                                 for n in range(POOL_ITEMS)))
        brief = self.box.base / "pool-brief.md"
        brief.write_text("Do your item.\n")
        lead, _, name = POOL.rpartition(".")
        self.box.cli("node", "pool", name, "--items", str(items), "--brief", str(brief),
                     "--max-workers", str(POOL_ITEMS), "--step-retry-backoff", "2s",
                     "--path", str(self.box.worktree(lead)))
        ndir = self.box.node_dir(POOL)
        quiet = f"[soak:quiet-file={self.box.base / 'quiet'}]"
        (ndir / "steps" / "01-REVIEW.md").write_text(f"[soak:sleep=1] {quiet}\n")
        (ndir / "worker-steps" / "00-WORK.md").write_text(f"[soak:chunks=2] [soak:pace=2] "
                                                          f"{quiet}\n")
        git(self.box.worktree(POOL), "add", "-A")
        git(self.box.worktree(POOL), "commit", "-q", "-m", "test setup", "--no-verify")


def _cap(name: str) -> tuple[str, ...]:
    return ("--max-cost", f"{CAPS[name]:g}") if name in CAPS else ()


def real_env(base: Path, agent_bin: Path, env: dict[str, str], claude_url: str) -> dict[str, str]:
    """The environment the real nodes start with: ``env`` plus the pinned CLIs first on
    PATH, a HOME of their own (with ``~/.claude/`` and ``~/.claude.json``, as a user's),
    Claude Code as a subscriber (its usage-window headers read)
    pointed at its mock, every non-essential call off (spec/agent-clis.md)."""
    home = base / "home"
    (home / ".claude").mkdir(parents=True, exist_ok=True)  # as a Claude Code user's home
    (home / ".claude.json").write_text("{}\n")  # has them (the sandbox binds what exists)
    gitconfig = Path.home() / ".gitconfig"
    if gitconfig.exists():  # the commit identity the agents' own git calls need
        shutil.copyfile(gitconfig, home / ".gitconfig")
    out = {**env, "PATH": f"{agent_bin}:{env.get('PATH', '')}", "HOME": str(home),
           "CLAUDE_CONFIG_DIR": str(home / ".claude"), "ANTHROPIC_BASE_URL": claude_url,
           "CLAUDE_CODE_OAUTH_TOKEN": "dummy", "DISABLE_TELEMETRY": "1",
           "DISABLE_ERROR_REPORTING": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_UPDATES": "1",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "CLAUDE_CODE_MAX_RETRIES": "2",
           "MOCK_API_KEY": "dummy", "FRACTAL_RESUME_JITTER_S": "1",
           "FRACTAL_PROBE_POLL_S": "0.5"}
    if os.geteuid() == 0:
        out["IS_SANDBOX"] = "1"
    for key in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY", "CODEX_API_KEY",
                "OPENAI_BASE_URL", "CODEX_HOME"):
        out.pop(key, None)
    return out
