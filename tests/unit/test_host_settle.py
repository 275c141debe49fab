"""``host.session_free``: a start waits while a settling session (or its exiting tmux server)
cannot say it is gone, and refuses only once the wait is over. ``host.launch_socket``: a
relaunch is hosted on the tmux server of the environment its run kept."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from fractal import tmux
from fractal.errors import FractalError, TmuxError
from fractal.lifecycle.start import hosting as host
from fractal.workspace import runenv

A, U, G = tmux.Liveness.ALIVE, tmux.Liveness.UNKNOWN, tmux.Liveness.GONE


@pytest.fixture
def paths(tmp_path: Path) -> Any:
    return SimpleNamespace(tree=SimpleNamespace(repo=tmp_path), branch="main.once")


def _script(monkeypatch: pytest.MonkeyPatch, answers: list[tmux.Liveness]) -> list[str]:
    """tmux.probe answers ``answers`` in turn (the last one from then on); returns the
    sessions it was asked about."""
    asked: list[str] = []
    feed: Iterator[tmux.Liveness] = iter(answers)

    def probe(session: str, socket: object = None) -> tmux.Liveness:
        asked.append(session)
        return next(feed, answers[-1])

    monkeypatch.setattr(tmux, "probe", probe)
    return asked


@pytest.mark.parametrize("answers", [
    [G],
    [A, A, G],
    [U, G],  # the first look meets the last session's server exiting
    [A, U, U, G],
])
def test_a_session_that_goes_frees_the_start(monkeypatch: pytest.MonkeyPatch, paths: Any,
                                             answers: list[tmux.Liveness]) -> None:
    asked = _script(monkeypatch, answers)
    hosted = host.session_free(paths, settling_wait=5.0)
    assert hosted.session == tmux.session_name(paths.tree.repo, paths.branch)
    assert len(asked) == len(answers)


@pytest.mark.parametrize(("answers", "error", "words"), [
    ([A], FractalError, "already exists"),
    ([U], TmuxError, "cannot tell"),
    ([A, U], TmuxError, "cannot tell"),
])
def test_a_session_that_stays_is_refused_after_the_wait(
        monkeypatch: pytest.MonkeyPatch, paths: Any, answers: list[tmux.Liveness],
        error: type[Exception], words: str) -> None:
    asked = _script(monkeypatch, answers)
    with pytest.raises(error, match=words):
        host.session_free(paths, settling_wait=0.3)
    assert len(asked) >= 2  # it looked again before refusing


@pytest.mark.parametrize(("fresh", "refresh", "kept", "caller", "expected"), [
    (False, False, "/srv/tree-t", None, "/srv/tree-t"),  # a bare shell's resume: the run's
    (False, False, "/srv/tree-t", "/srv/other", "/srv/tree-t"),
    (False, False, None, "/srv/other", "/tmp"),  # none kept: /tmp, where the run started
    (False, True, "/srv/tree-t", "/srv/other", "/srv/other"),  # --refresh-env: the caller's
    (True, False, "/srv/tree-t", "/srv/other", "/srv/other"),  # a fresh start: the caller's
    ("no file", False, None, "/srv/other", "/srv/other"),  # nothing kept: the caller's
])
def test_a_relaunch_is_hosted_on_the_tmux_server_of_its_kept_environment(
        tmp_path: Path, fresh: object, refresh: bool, kept: str | None, caller: str | None,
        expected: str) -> None:
    """``host.launch_socket``: the socket is the one of the environment the supervisor boots
    with, so a resume from a shell without the start shell's TMUX_TMPDIR never moves the
    node onto that shell's default tmux server."""
    paths: Any = SimpleNamespace(run_env_path=tmp_path / "private" / "env.json")
    if fresh != "no file":
        runenv.keep(paths.run_env_path, {"PATH": "/bin", **(
            {"TMUX_TMPDIR": kept} if kept else {})})
    environ = {"PATH": "/bin", **({"TMUX_TMPDIR": caller} if caller else {})}
    socket = host.launch_socket(paths, environ, fresh=fresh is True, refresh=refresh)
    assert socket == Path(expected) / f"tmux-{os.getuid()}" / "default"
