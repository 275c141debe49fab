"""Test doubles shared across tiers. Fakes record what they were given; they never mock."""

from __future__ import annotations

import io

from fractal.runtime.pane import PaneReporter


class RecordingReporter(PaneReporter):
    """A pane reporter that keeps every line in memory instead of writing to a pane."""

    def __init__(self) -> None:
        super().__init__(stream=io.StringIO())

    @property
    def lines(self) -> list[str]:
        """Every line written so far."""
        stream = self.stream
        assert isinstance(stream, io.StringIO)
        return stream.getvalue().splitlines()
