"""domain/subtree.py: the wording of descendants left running, gates never approved and
hand-backs not merged again."""

from __future__ import annotations

import pytest

from fractal.domain.subtree import Unsettled, never_approved, not_merged, unsettled_notice


@pytest.mark.parametrize(("children", "notice"), [
    ([], None),
    ([Unsettled("main.lead.div", "active", True)],
     "ended with 1 child still running: main.lead.div awaiting approval"),
    ([Unsettled("main.lead.mul", "paused"), Unsettled("main.lead.div", "active", True)],
     "ended with 2 children still running: main.lead.div awaiting approval, "
     "main.lead.mul paused"),
])
def test_unsettled_notice(children: list[Unsettled], notice: str | None) -> None:
    assert unsettled_notice(children) == notice


@pytest.mark.parametrize(("reason", "gates", "expected"), [
    ("Finished by request", ["EXECUTE"], "Finished by request; EXECUTE never approved"),
    ("Finished by request", ["EXECUTE", "EXECUTE", "SHIP"],
     "Finished by request; EXECUTE, SHIP never approved"),
    ("Finished by request", [], "Finished by request"),
    ("Stopped by request", ["EXECUTE"], "Stopped by request"),
    ("Reached max iterations (2)", ["EXECUTE"], "Reached max iterations (2)"),
])
def test_never_approved(reason: str, gates: list[str], expected: str) -> None:
    assert never_approved(reason, gates) == expected


@pytest.mark.parametrize(("reason", "children", "expected"), [
    ("Timed out at iteration 1.1 (run 30m)", ["main.lead.wc"],
     "Timed out at iteration 1.1 (run 30m); hand-back of main.lead.wc not merged"),
    ("Stopped by request", ["main.lead.a", "main.lead.b"],
     "Stopped by request; hand-backs of main.lead.a, main.lead.b not merged"),
    ("Reached max iterations (1)", [], "Reached max iterations (1)"),
])
def test_not_merged(reason: str, children: list[str], expected: str) -> None:
    assert not_merged(reason, children) == expected
