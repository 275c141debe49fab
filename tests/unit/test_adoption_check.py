"""The loose-object check adoption makes before a private object enters the shared
store (``fractal.workspace.adoption.check_loose``): pure bytes in, a reason out."""

from __future__ import annotations

import zlib

import pytest

from fractal.workspace.adoption import check_loose

HELLO = "b6fc4c620b67d95f953a5c1c1230aaab5db5a1b0"  # git hash-object of "hello"
GOOD = zlib.compress(b"blob 5\0hello")


@pytest.mark.parametrize(("raw", "sha", "why"), [
    (GOOD, HELLO, ""),
    (GOOD, "ab" * 20, "its content does not hash to its name"),  # a forged name
    (zlib.compress(b"blob 9\0hello"), HELLO, "its length is not the header's"),
    (zlib.compress(b"blob 2\0hello"), HELLO, "longer than its header says"),
    (zlib.compress(b"evil 5\0hello"), HELLO, "no object header"),
    (zlib.compress(b"blob x\0hello"), HELLO, "no object header"),
    (zlib.compress(b"blob" + b"5" * 80), HELLO, "no object header"),  # no NUL in sight
    (b"not zlib", HELLO, "not a zlib stream"),
    (GOOD + b"tail", HELLO, "a cut or padded zlib stream"),
    (GOOD[:-4], HELLO, "a cut or padded zlib stream"),
    (b"", HELLO, "a cut or padded zlib stream"),
])
def test_a_loose_object_is_taken_only_when_it_hashes_to_its_name(
        raw: bytes, sha: str, why: str) -> None:
    assert check_loose(raw, sha) == why


def test_a_sha256_name_is_checked_with_sha256() -> None:
    import hashlib

    sha = hashlib.sha256(b"blob 5\0hello").hexdigest()
    assert check_loose(GOOD, sha) == ""
    assert check_loose(GOOD, "cd" * 32) == "its content does not hash to its name"
