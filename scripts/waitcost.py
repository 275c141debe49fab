"""What a waiting lead's SYNCs cost, on the fake clock: ``python scripts/waitcost.py
HOURS [CAP ...]`` from the repository's top (with ``.venv/bin/python``).

A lead in ``wait: children`` (``wait`` 1m, ``max_iters`` 1) waits HOURS fake hours for 4
children, which settle at a quarter, half, three quarters and the whole of it. The run is
the real supervisor with ``tests/loopfakes.py``'s fake clock and scripted launcher. It
prints one JSON line: the waiting SYNC launches (in all and per hour), their mean prompt
bytes, and the context each one carried, counted as the bytes of every prompt sent into
its session so far, itself included (the conversation a resumed CLI replays; the
answers, which the fake does not write, would add to it). Each CAP also replays the
same prompts as if every SYNC had resumed a session kept for CAP SYNCs, then started
afresh. Run it from the top of another checkout (with this interpreter and
``PYTHONPATH=.``) to measure that version:
docs/loop.md gives the figures of the version that launched a SYNC every window and of
the one that launches one per change.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))

from tests.loopfakes import LoopTree  # the checkout's own harness, found from its top

CHILDREN = ("c1", "c2", "c3", "c4")


def main(hours: float, caps: list[int]) -> dict[str, object]:
    t = LoopTree(Path(tempfile.mkdtemp(prefix="waitcost-")))
    t.node("lead", {"01-A.md": "[stub:write=a.txt:a]",
                    "02-MERGE.md": "---\nwait: children\n---\n[stub:write=m.txt:m]"},
           "--max-iters", "1", "--wait", "1m")
    for n, child in enumerate(CHILDREN):
        t.cli("node", "init", child, "--parent", "lead")
        t.sql_write("UPDATE nodes SET status = 'active' WHERE node = ?", f"main.lead.{child}")
        t.clock.after(hours * 3600 * (n + 1) / len(CHILDREN),
                      lambda c=child: t.sql_write("UPDATE nodes SET status = 'completed' "
                                                  "WHERE node = ?", f"main.lead.{c}"))
    cpu = time.process_time()
    t.run("lead")
    cpu = time.process_time() - cpu
    session_of = dict(t.sql("SELECT step_id, session FROM steps WHERE node = 'main.lead'"))
    history: dict[str, int] = {}
    waits: list[tuple[int, int]] = []  # (prompt bytes, context bytes) of each waiting SYNC
    for call in t.launcher.calls:
        size = len(call.prompt.encode())
        session = (call.env.get("FRACTAL_SESSION_ID") or session_of.get(call.step_id)
                   or f"?{call.step_id}")
        history[session] = history.get(session, 0) + size
        if call.is_sync and "waiting for children" in call.label:
            waits.append((size, history[session]))
    sizes = [w[0] for w in waits]
    out: dict[str, object] = {
        "hours": hours, "wait_syncs": len(waits), "per_hour": round(len(waits) / hours, 2),
        "prompt_bytes_mean": round(sum(sizes) / len(sizes)) if sizes else 0,
        "context_bytes_max": max((w[1] for w in waits), default=0),
        "context_bytes_total": sum(w[1] for w in waits), "cpu_s": round(cpu, 1)}
    for cap in caps:
        carried, segment = [], 0
        for n, size in enumerate(sizes):
            segment = size if n % cap == 0 else segment + size
            carried.append(segment)
        out[f"cap{cap}_context_max"] = max(carried, default=0)
        out[f"cap{cap}_context_total"] = sum(carried)
    return out


if __name__ == "__main__":
    print(json.dumps(main(float(sys.argv[1]), [int(c) for c in sys.argv[2:]])))
