"""What must hold for a tree after any fault, once healed (issue 8: Fault injection).

``check_tree(repo, ...)`` returns every violation it finds (empty: all hold); run it on a
quiescent tree, after ``fractal node list`` has healed crashed nodes:

- ``rows-closed``: every run, iteration and step row is closed with a status of its level's
  vocabulary (a run never ``failed``; ``paused`` only on a step of a run that is parked
  now, or was once: the loop's ``pause`` event, or the heal's ``parked ...`` one; or a
  step a closed usage window stopped, ``usage limit ...``, which the loop waits out);
  only the parked run of a ``paused`` node (and its open iteration) may stay open.
- ``node-agrees``: a node's status is its last run's (``paused`` while that run is open,
  ``idle`` without runs; ``missing`` once its checkout vanished, with no run open);
  nothing is left ``active``.
- ``integrity``: ``PRAGMA integrity_check`` is ``ok`` and ``PRAGMA foreign_key_check`` is
  empty.
- ``no-process``: no process of the tree is alive (``tree_processes``).
- ``bytes-kept``: every chunk in the soak agent's journal (tests/soak/agent.py) is still on
  disk in its worktree or committed on its node branch.
- ``paused-untouched``: a node snapshotted while paused (``snapshot_node``) has the same
  rows, branch head and worktree files.
- ``pool-items`` (``check_pool``, asked for by a pool scenario): no item worked by two
  runs at once, attempts exact, no item lost, the pool's end reason its counts.

Over 400 lines: every invariant's checker is here, so the fault scenarios and the tree
driver (chaos.py) check one definition of each. Plain sqlite3, git and /proc: the checker shares no code with what it checks, except
``launch_marker`` (the marker is a contract between the launcher and the healer).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import sqlite3
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from fractal.domain.agent.markers import launch_marker
from fractal.tree import find_tree

CLOSED: dict[str, frozenset[str]] = {
    "runs": frozenset({"completed", "stopped", "exited", "killed"}),
    "iterations": frozenset({"completed", "failed", "stopped", "exited", "killed"}),
    "steps": frozenset({"completed", "failed", "stopped", "exited", "killed", "paused"}),
}
_NODE_VARS = (b"_NODE=", b"NODE_DIR=", b"WORKTREE_DIR=")
_SKIP_FILES = {".wake"}  # touched by any verb aimed at the tree, harmless


@dataclass(frozen=True)
class Violation:
    """One broken invariant: its name (see the module docstring) and what was seen."""

    invariant: str
    detail: str

    def __str__(self) -> str:
        return f"[{self.invariant}] {self.detail}"


@dataclass(frozen=True)
class TreeProcess:
    """A live process that belongs to the tree, and why it is counted as the tree's."""

    pid: int
    why: str
    cmdline: str


@dataclass(frozen=True)
class NodeSnapshot:
    """What must not change while a node is paused: status, rows, branch head, files
    (worktree-relative path -> sha1, ``.git`` and ``.wake`` left out)."""

    branch: str
    status: str
    rows: tuple[tuple[object, ...], ...]
    head: str
    files: tuple[tuple[str, str], ...]


def _db(repo: Path) -> Path:
    return find_tree(repo).db_path


def _query(db: Path, sql: str, *params: object) -> list[tuple[object, ...]]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30.0)
    try:
        return list(con.execute(sql, params))
    finally:
        con.close()


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, check=False)


# -- rows and statuses --------------------------------------------------------------------

def _parked_runs(db: Path) -> set[int]:
    """Open runs of paused nodes: the only rows allowed to stay open."""
    rows = _query(db, "SELECT r.run_id FROM runs r JOIN nodes n ON n.node = r.node "
                      "WHERE n.status = 'paused' AND r.ended_at IS NULL")
    return {int(str(r[0])) for r in rows}


def check_rows(db: Path) -> list[Violation]:
    """``rows-closed`` (see the module docstring)."""
    out: list[Violation] = []
    parked = _parked_runs(db)
    ever_parked = {int(str(r[0])) for r in _query(
        db, "SELECT DISTINCT run_id FROM events WHERE event = 'pause' AND (actor = 'loop' "
            "OR metadata LIKE 'parked %') AND run_id IS NOT NULL")}  # the loop's, or a heal's
    for table, key in (("runs", "run_id"), ("iterations", "iter_id"), ("steps", "step_id")):
        run_col = "run_id"
        for row_id, node, run_id, status, code, ended, meta in _query(
                db, f"SELECT {key}, node, {run_col}, status, exit_code, ended_at, metadata "
                    f"FROM {table}"):
            what = f"{table[:-1]} {row_id} of {node} ({status})"
            if ended is None:
                if table == "steps" or int(str(run_id)) not in parked:
                    out.append(Violation("rows-closed", f"{what} is still open"))
                continue
            if status not in CLOSED[table]:
                out.append(Violation("rows-closed", f"{what} closed with a status outside "
                                                    f"{sorted(CLOSED[table])}"))
            elif status == "paused" and int(str(run_id)) not in ever_parked | parked \
                    and not str(meta or "").startswith("usage limit"):  # a window waited out
                out.append(Violation("rows-closed", f"{what} but its run was never parked"))
            if code is None and table == "runs":
                out.append(Violation("rows-closed", f"{what} has no exit code"))
    return out


def check_nodes(db: Path) -> list[Violation]:
    """``node-agrees`` (see the module docstring)."""
    out: list[Violation] = []
    last = {str(node): (status, ended) for node, status, ended in _query(
        db, "SELECT node, status, ended_at FROM runs WHERE run_id IN "
            "(SELECT MAX(run_id) FROM runs GROUP BY node)")}
    for node, status in _query(db, "SELECT node, status FROM nodes"):
        run = last.get(str(node))
        if status == "missing" and (run is None or run[1] is not None):
            continue  # its checkout vanished after its run ended (or before any)
        if run is None:
            expected = {"idle", "retired"}
        elif run[1] is None:
            expected = {"paused"}
        else:
            expected = {str(run[0])}
        if status not in expected:
            out.append(Violation("node-agrees", f"node {node} is {status}, its last run says "
                                                f"{' or '.join(sorted(expected))}"))
    return out


def check_integrity(db: Path) -> list[Violation]:
    """``integrity`` (see the module docstring)."""
    result = _query(db, "PRAGMA integrity_check")
    out = [] if result == [("ok",)] else [Violation("integrity", f"integrity_check: {result}")]
    broken = _query(db, "PRAGMA foreign_key_check")
    if broken:
        out.append(Violation("integrity", f"foreign_key_check: {broken[:5]}"))
    return out


# -- processes ----------------------------------------------------------------------------

def _ancestors() -> set[int]:
    pids = {os.getpid()}
    proc: psutil.Process | None = psutil.Process()
    while proc is not None:
        pids.add(proc.pid)
        try:
            proc = proc.parent()
        except psutil.Error:
            break
    return pids


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return b""


def _recorded_groups(db: Path) -> dict[int, float]:
    rows = _query(db, "SELECT pgid, pgid_started FROM steps WHERE pgid IS NOT NULL")
    return {int(str(g)): float(str(t)) for g, t in rows if t is not None}


def _in_recorded_group(pid: int, groups: dict[int, float]) -> bool:
    try:
        pgid = os.getpgid(pid)
    except OSError:
        return False
    if pgid not in groups:
        return False
    try:  # the leader is alive: it must be the recorded one (a pgid is never reused
        return abs(psutil.Process(pgid).create_time() - groups[pgid]) < 0.05  # while in use)
    except psutil.Error:
        return True  # leader gone, members left: still the recorded group


def tree_processes(repo: Path) -> list[TreeProcess]:
    """Live processes of the tree at ``repo`` (zombies, the caller and its ancestors aside):
    carrying a launch marker of the tree's database, or a loop variable pointing into the
    repository; with the repository in their command line or working directory; members
    of a process group recorded on a step row; a recorded supervisor still running."""
    db = _db(repo)
    prefix = f"FRACTAL_LAUNCH_ID={launch_marker(str(db), 0).rsplit('-', 1)[0]}-".encode()
    inside = str(repo.resolve()).encode() + b"/"
    groups = _recorded_groups(db)
    supervisors = {int(str(p)): float(str(t)) for p, t in _query(
        db, "SELECT supervisor_pid, supervisor_started FROM nodes "
            "WHERE supervisor_pid IS NOT NULL AND supervisor_started IS NOT NULL")}
    skip = _ancestors()
    found: list[TreeProcess] = []
    for proc in psutil.process_iter(["pid", "status", "create_time"]):
        pid = proc.info["pid"]
        if pid in skip or proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        environ = _read(f"/proc/{pid}/environ")
        cmdline = _read(f"/proc/{pid}/cmdline")
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd").encode() + b"/"
        except OSError:
            cwd = b""
        entries = environ.split(b"\0")
        why = ""
        if any(e.startswith(prefix) for e in entries):
            why = "launch marker"
        elif any(e.startswith(v) and e[len(v):].startswith(inside[:-1])
                 for e in entries for v in _NODE_VARS):
            why = "loop variable"
        elif inside[:-1] in cmdline:
            why = "command line"
        elif cwd.startswith(inside):
            why = "working directory"
        elif _in_recorded_group(pid, groups):
            why = "recorded process group"
        elif pid in supervisors and abs(proc.info["create_time"] - supervisors[pid]) < 0.05:
            why = "recorded supervisor"
        if why:
            text = cmdline.replace(b"\0", b" ").decode(errors="replace").strip()
            found.append(TreeProcess(pid, why, text[:200]))
    return found


def check_processes(repo: Path) -> list[Violation]:
    """``no-process`` (see the module docstring)."""
    return [Violation("no-process", f"pid {p.pid} ({p.why}) still running: {p.cmdline}")
            for p in tree_processes(repo)]


# -- bytes --------------------------------------------------------------------------------

def _committed(worktree: Path, branch: str, path: str) -> bytes | None:
    proc = _git(worktree, "show", f"{branch}:{path}")
    return proc.stdout if proc.returncode == 0 else None


def check_bytes(journal: Path) -> list[Violation]:
    """``bytes-kept``: each journaled chunk is on disk or on its branch (see the module
    docstring). A missing journal means nothing was written."""
    try:
        lines = journal.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    entries: dict[tuple[str, str, str], list[str]] = {}
    for line in lines:
        if not line.strip():
            continue
        item = json.loads(line)
        entries.setdefault((item["worktree"], item["branch"], item["path"]), []).append(
            item["text"])
    out: list[Violation] = []
    for (worktree, branch, path), texts in entries.items():
        on_disk = _read(str(Path(worktree) / path))
        committed = _committed(Path(worktree), branch, path) or b""
        lost = [t for t in texts if t.encode() not in on_disk and t.encode() not in committed]
        if lost:
            out.append(Violation("bytes-kept", f"{len(lost)} of {len(texts)} chunk(s) of "
                                               f"{branch}:{path} are neither on disk nor "
                                               f"committed, e.g. {lost[0].strip()!r}"))
    return out


# -- paused nodes -------------------------------------------------------------------------

def _files(worktree: Path) -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    for path in sorted(worktree.rglob("*")):
        rel = path.relative_to(worktree)
        if rel.parts[0] == ".git" or path.name in _SKIP_FILES or not path.is_file() \
                or path.is_symlink():
            continue
        out.append((str(rel), hashlib.sha1(path.read_bytes()).hexdigest()))
    return tuple(out)


def snapshot_node(repo: Path, branch: str) -> NodeSnapshot:
    """The parts of ``branch`` a fault elsewhere must leave alone (take it while paused)."""
    tree = find_tree(repo)
    db = tree.db_path
    (status,), = _query(db, "SELECT status FROM nodes WHERE node = ?", branch)
    rows: list[tuple[object, ...]] = []
    for table in ("runs", "iterations", "steps", "signals"):
        rows += [(table, *r) for r in _query(db, f"SELECT * FROM {table} WHERE node = ? "
                                                 "ORDER BY 1", branch)]
    head = _git(repo, "rev-parse", branch).stdout.decode().strip()
    return NodeSnapshot(branch, str(status), tuple(rows), head,
                        _files(tree.node(branch).worktree))


def check_untouched(repo: Path, before: Iterable[NodeSnapshot]) -> list[Violation]:
    """``paused-untouched``: each snapshot still matches (see the module docstring)."""
    out: list[Violation] = []
    for snap in before:
        now = snapshot_node(repo, snap.branch)
        for part in ("status", "rows", "head", "files"):
            if getattr(now, part) != getattr(snap, part):
                old, new = getattr(snap, part), getattr(now, part)
                if part in ("rows", "files"):
                    old, new = sorted(set(old) - set(new))[:2], sorted(set(new) - set(old))[:2]
                out.append(Violation("paused-untouched", f"{snap.branch}: {part} changed "
                                                         f"from {old} to {new}"))
    return out


# -- worker pools -------------------------------------------------------------------------

def _pool_files(repo: Path, ref: str, under: str) -> dict[str, str]:
    out = _git(repo, "ls-tree", "-r", ref, "--", under).stdout.decode()
    return {line.partition("\t")[2]: line.split()[2] for line in out.splitlines() if line}


def check_pool(db: Path, pool: str, *, unstarted: int = 0,
               repo: Path | None = None) -> list[Violation]:
    """``pool-items`` for pool node ``pool``: each item's worker node is its own and its
    runs never overlap (no item worked twice at once); an item has at least as many
    attempts as worker runs, at most 2, and all items together have no more attempts
    beyond their runs than ``unstarted`` (claims the dispatcher announced as never
    started: their attempt counts, no run exists); once the pool's newest run is closed
    ``completed`` every item is ``done`` or ``failed`` and the run's reason is
    ``pool: N done, M failed`` of those counts (no item lost). With ``repo``, each done
    item's files under ``soak/<worker>/`` are on the pool's branch as on the worker's."""
    out: list[Violation] = []
    items = _query(db, "SELECT item_id, status, attempts, worker FROM pool_items WHERE "
                       "pool = ? ORDER BY position", pool)
    workers = [str(w) for _i, _s, _a, w in items if w is not None]
    if len(set(workers)) != len(workers):
        out.append(Violation("pool-items", f"{pool}: two items share a worker: {workers}"))
    beyond = 0
    for item_id, status, attempts, worker in items:
        runs = _query(db, "SELECT started_at, ended_at FROM runs WHERE node = ? ORDER BY "
                          "started_at", str(worker)) if worker is not None else []
        what = f"{pool} item {item_id} ({status}, {attempts} attempt(s), {len(runs)} run(s))"
        for (_, ended), (started, _) in itertools.pairwise(runs):
            if ended is None or str(ended) > str(started):
                out.append(Violation("pool-items", f"{what}: runs overlap: {runs}"))
        if not len(runs) <= int(str(attempts)) <= 2:
            out.append(Violation("pool-items", f"{what}: attempts are not its runs"))
        beyond += int(str(attempts)) - len(runs)
        if repo is not None and status == "done" and worker is not None:
            theirs = _pool_files(repo, str(worker), f"soak/{worker}")
            ours = _pool_files(repo, pool, f"soak/{worker}")
            if not theirs.items() <= ours.items():
                out.append(Violation("pool-items", f"{what}: its work is not all merged "
                                                   f"({len(ours)} of {len(theirs)} files)"))
    if beyond > unstarted:
        out.append(Violation("pool-items", f"{pool}: {beyond} attempt(s) without a worker "
                                           f"run, {unstarted} announced as never started"))
    last = _query(db, "SELECT status, metadata FROM runs WHERE node = ? AND ended_at IS NOT "
                      "NULL AND run_id = (SELECT MAX(run_id) FROM runs WHERE node = ?)",
                  pool, pool)
    if last and last[0][0] == "completed":
        left = [str(i) for i, s, _a, _w in items if s not in ("done", "failed")]
        if left:
            out.append(Violation("pool-items", f"{pool} ended with items not done or "
                                               f"failed: {left}"))
        done = sum(1 for _i, s, _a, _w in items if s == "done")
        failed = sum(1 for _i, s, _a, _w in items if s == "failed")
        if last[0][1] != f"pool: {done} done, {failed} failed":
            out.append(Violation("pool-items", f"{pool}'s run ended {last[0][1]!r}, its "
                                               f"items say {done} done, {failed} failed"))
    return out


# -- all together -------------------------------------------------------------------------

def check_tree(repo: Path, *, journal: Path | None = None,
               untouched: Sequence[NodeSnapshot] = ()) -> list[Violation]:
    """Every invariant of the module docstring for the tree at ``repo``; [] when all hold.

    ``journal``: the soak agent's journal (``$SOAK_JOURNAL``); ``untouched``: snapshots of
    nodes that were paused before the fault.
    """
    db = _db(repo)
    out = check_rows(db) + check_nodes(db) + check_integrity(db) + check_processes(repo)
    if journal is not None:
        out += check_bytes(journal)
    return out + check_untouched(repo, untouched)
