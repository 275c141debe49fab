"""Which machine owns a node (``fractal/domain/hosts.py``): another host's node is never
acted on from here, and each refusal or note names the host and what to do there."""

from __future__ import annotations

import pytest

from fractal.domain.hosts import elsewhere, kill_refusal, signal_note, status_note


@pytest.mark.parametrize(("host", "here", "owner"), [
    (None, "laptop", None),  # a row older than the column: this machine's
    ("laptop", "laptop", None),
    ("build-07", "laptop", "build-07"),
    ("", "laptop", ""),  # an empty name is still a name that is not this one
])
def test_elsewhere_names_the_owner_only_when_it_is_another_machine(
        host: str | None, here: str, owner: str | None) -> None:
    assert elsewhere(host, here) == owner


def test_the_kill_refusal_names_both_hosts_and_both_ways_out() -> None:
    text = kill_refusal("main.a", "build-07", "laptop")
    assert "runs on host build-07, not on this one (laptop)" in text
    assert "`fractal node kill main.a` on build-07" in text
    assert "`fractal node stop main.a` from here" in text


@pytest.mark.parametrize(("note", "words"), [
    (signal_note("build-07"), ("host build-07", "ledger")),
    (status_note("build-07", "laptop"), ("on host build-07, not this one (laptop)",
                                        "not checked from here",
                                        "`fractal node status` on build-07")),
])
def test_the_notes_say_where_the_node_runs(note: str, words: tuple[str, ...]) -> None:
    assert all(word in note for word in words)
