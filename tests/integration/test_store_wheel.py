"""The built wheel ships its migrations: a fresh install creates a working database."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from fractal.store.schema import HEAD_REVISION

REPO = Path(__file__).resolve().parents[2]

_PROBE = textwrap.dedent("""
    import json, sqlite3, sys
    from pathlib import Path
    import fractal.store.schema as schema
    from fractal.store.ledger import Ledger
    from fractal.store import reader

    db = Path(sys.argv[1])
    ledger = Ledger(db)
    ledger.register_node("main.probe", parent="main", title=None, worktree=None)
    run = ledger.open_run("main.probe", agent="stub", max_cost=5.0, parent_run_id=None)
    it = ledger.open_iteration("main.probe", run, 1, agent="stub", model=None)
    step = ledger.open_step(node="main.probe", run_id=run, iter_id=it, step=1,
                            step_name="PLAN", agent="stub", model=None, session=None)
    ledger.close_step(step, "completed", 0, "", cost=0.25)
    ledger.close_iteration(it, "completed", 0, "")
    ledger.close_run(run, "completed", 0, "done")
    with sqlite3.connect(db) as conn:
        version = conn.execute("SELECT version_num FROM alembic_version").fetchone()[0]
    print(json.dumps({
        "migrations": str(schema.migrations_dir()),
        "package": str(Path(schema.__file__).parent.parent),
        "version": version,
        "activity": len(reader.activity(db, ["main.probe"], None)),
        "ok": ledger.integrity_ok(),
    }))
""")


def _run(*argv: str | Path, cwd: Path) -> str:
    proc = subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, f"{argv} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_wheel_in_a_fresh_venv_creates_a_working_database(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", dist, REPO, cwd=tmp_path)
    (wheel,) = dist.glob("fractal-*.whl")
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    _run(python, "-m", "pip", "install", "-q", wheel, cwd=tmp_path)

    db = tmp_path / "elsewhere" / "tree" / "fractal.db"
    # cwd is tmp_path, so the checkout is not on sys.path: only the wheel can answer.
    report = json.loads(_run(python, "-c", _PROBE, db, cwd=tmp_path))
    site = venv.resolve()
    assert Path(report["package"]).is_relative_to(site)
    assert Path(report["migrations"]) == Path(report["package"]) / "migrations"
    assert report["version"] == HEAD_REVISION
    assert report["activity"] == 6  # run, iteration and step: a start and an end each
    assert report["ok"] is True
