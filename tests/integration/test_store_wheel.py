"""The built wheel ships its migrations: a fresh install creates a working database."""

from __future__ import annotations

import email.parser
import importlib.util
import json
import subprocess
import sys
import textwrap
import zipfile
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

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


def _pip(*args: str | Path, cwd: Path) -> str:
    return _run(sys.executable, "-m", "pip", "--disable-pip-version-check", *args, cwd=cwd)


def _requires(wheel: Path) -> list[Requirement]:
    """The wheel's own ``Requires-Dist`` (without the extras)."""
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        meta = email.parser.BytesParser().parsebytes(archive.read(name))
    return [Requirement(line) for line in meta.get_all("Requires-Dist") or []]


def _link_dependencies(wheel: Path, target: Path) -> list[str]:
    """Make the wheel's declared dependencies, and theirs, importable from ``target`` by
    linking each one's files from this environment (only those: an import the wheel does
    not declare fails as in a real install); return their names.

    This is the offline equivalent of letting pip resolve and download them: every
    requirement must be met by the linked version."""
    target.mkdir(parents=True)
    linked: dict[str, str] = {}
    todo = _requires(wheel)
    while todo:
        req = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        dist = metadata.distribution(req.name)
        assert req.specifier.contains(dist.version, prereleases=True), (req, dist.version)
        key = req.name.lower().replace("_", "-")
        if key in linked:
            continue
        linked[key] = dist.version
        assert dist.files is not None, f"{req.name} lists no files"
        for top in {f.parts[0] for f in dist.files} - {"..", "__pycache__"}:
            source = Path(str(dist.locate_file(top)))
            if source.exists() and not (target / top).exists():
                (target / top).symlink_to(source)
        todo += [Requirement(line) for line in dist.requires or []]
    return sorted(linked)


def test_wheel_in_a_fresh_venv_creates_a_working_database(tmp_path: Path) -> None:
    """Build the wheel with the project's own backend, install it into a new virtualenv
    with the dependencies it declares, and open a database with that environment alone.

    Offline and quick: the backend (hatchling, a dev dependency) is reused from this
    environment when installed instead of an isolated build environment being made; the new
    venv gets no pip of its own (this environment's pip installs into it with
    ``--python``); the dependencies are linked from this environment, not downloaded."""
    dist = tmp_path / "dist"
    isolation = [] if importlib.util.find_spec("hatchling") is None else ["--no-build-isolation"]
    _pip("wheel", "--no-deps", *isolation, "-q", "-w", dist, REPO, cwd=tmp_path)
    (wheel,) = dist.glob("fractal-*.whl")
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    _pip("--python", python, "install", "-q", "--no-deps", "--no-index", "--no-compile",
         wheel, cwd=tmp_path)
    deps = venv / "deps"
    assert {"sqlalchemy", "alembic", "click"} <= set(_link_dependencies(wheel, deps))
    site = Path(_run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))",
                     cwd=tmp_path).strip())
    (site / "dependencies.pth").write_text(f"{deps}\n")

    db = tmp_path / "elsewhere" / "tree" / "fractal.db"
    # cwd is tmp_path, so the checkout is not on sys.path: only the wheel can answer.
    report = json.loads(_run(python, "-c", _PROBE, db, cwd=tmp_path))
    site = venv.resolve()
    assert Path(report["package"]).is_relative_to(site)
    assert Path(report["migrations"]) == Path(report["package"]) / "migrations"
    assert report["version"] == HEAD_REVISION
    assert report["activity"] == 6  # run, iteration and step: a start and an end each
    assert report["ok"] is True
