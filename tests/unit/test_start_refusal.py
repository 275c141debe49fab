"""Which statuses ``fractal node start [--continue]`` refuses, and the next step each
refusal names (``domain.run.starting.start_refusal``)."""

from __future__ import annotations

import pytest

from fractal.domain.run.starting import start_refusal

CASES: list[tuple[str | None, bool, bool, str | None]] = [
    # status, --continue, tree brake on, what the refusal says (None: it starts)
    ("idle", False, False, None),
    ("completed", True, False, None),
    ("killed", True, False, None),
    ("completed", False, False, "`fractal node start main.x --continue`"),
    ("idle", True, False, "a node never run starts without it: `fractal node start main.x`"),
    ("retired", True, False, "node main.x is retired; --continue needs a settled node"),
    (None, False, False, "node main.x is unregistered, not idle"),
    ("active", False, False, "its run is still going; follow it (`fractal node status"),
    ("active", True, False, "stop it (`fractal node stop main.x`)"),
    ("paused", False, False, "`fractal node resume main.x` resumes its run"),
    ("paused", True, False, "`fractal node resume main.x` resumes its run"),
    ("paused", False, True, "the tree main is paused; `fractal resume` lifts the brake"),
    ("paused", True, True, "the tree main is paused; `fractal resume` lifts the brake"),
]


@pytest.mark.parametrize(("status", "continuing", "braked", "says"), CASES)
def test_start_refusal(status: str | None, continuing: bool, braked: bool,
                       says: str | None) -> None:
    refusal = start_refusal("main.x", status, continuing=continuing, tree_paused=braked,
                            root="main")
    if says is None:
        assert refusal is None
    else:
        assert refusal is not None and says in refusal
