"""Become a subreaper, orphan a grandchild, then reap it with reap_orphans (exit 0 = pass)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from fractal.procs import processes


def main() -> int:
    if not processes.become_subreaper():
        print("become_subreaper returned False")
        return 2
    launched = processes.spawn_group(["sh", "-c", "sleep 0.2 & echo $!"], cwd=Path.cwd(),
                                     env=os.environ)
    assert launched.popen.stdout is not None
    orphan = int(launched.popen.stdout.readline())
    launched.popen.wait()
    deadline = time.monotonic() + 10
    reaped: list[int] = []
    while orphan not in reaped and time.monotonic() < deadline:
        reaped += processes.reap_orphans(keep={launched.popen.pid})
        time.sleep(0.02)
    print(f"orphan={orphan} reaped={reaped}")
    return 0 if orphan in reaped else 1


if __name__ == "__main__":
    sys.exit(main())
