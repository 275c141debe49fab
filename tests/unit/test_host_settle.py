"""``host.session_free``: a start waits while a settling session (or its exiting tmux server)
cannot say it is gone, and refuses only once the wait is over."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from fractal import tmux
from fractal.errors import FractalError, TmuxError
from fractal.lifecycle.start import hosting as host

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
