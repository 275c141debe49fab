"""Plan files: ``plans/<UTC stamp>-<run.iter>-<slug>.md``, one per plan an agent writes,
opening with an H1. Pure naming and parsing rules; no I/O, no clock.

The stamp is ``YYYYMMDDTHHMMSSZ`` (sorts in time order), ``run.iter`` the iteration that
wrote the plan (``ITER_REF``, e.g. ``2.3``; ``0.0`` outside any run), and the slug lower
case letters, digits and single hyphens.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from fractal.domain.errors import InvalidValue

__all__ = ["NO_ITERATION", "PlanName", "check_iter_ref", "check_slug", "default_title",
           "parse_plan_name", "plan_filename", "plan_text"]

NO_ITERATION = "0.0"
"""The ``run.iter`` of a plan written outside any run."""

_SLUG = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")
_ITER_REF = re.compile(r"\d+\.\d+")
_NAME = re.compile(r"(\d{8}T\d{6}Z)-(\d+\.\d+)-([a-z0-9]+(?:-[a-z0-9]+)*)\.md")
_SLUG_MAX = 60


@dataclass(frozen=True)
class PlanName:
    """The parts of a plan's file name: ``stamp`` (``YYYYMMDDTHHMMSSZ``), ``iter_ref``
    and ``slug``."""

    stamp: str
    iter_ref: str
    slug: str


def check_slug(slug: str) -> str:
    """``slug`` when it is a plan slug (lower case letters, digits, single hyphens, at
    most 60 characters); raise InvalidValue with an example otherwise."""
    if not _SLUG.fullmatch(slug) or len(slug) > _SLUG_MAX:
        raise InvalidValue(f"plan name {slug!r} is not a slug: use lower-case letters, digits "
                           f"and single hyphens, at most {_SLUG_MAX} characters, e.g. "
                           "parser-rewrite")
    return slug


def check_iter_ref(ref: str) -> str:
    """``ref`` when it is ``<run>.<iter>`` (e.g. ``2.3``); raise InvalidValue otherwise."""
    if not _ITER_REF.fullmatch(ref.strip()):
        raise InvalidValue(f"iteration reference {ref!r} is not RUN.ITER, e.g. 2.3")
    return ref.strip()


def plan_filename(moment: datetime, iter_ref: str, slug: str) -> str:
    """``<YYYYMMDDTHHMMSSZ>-<iter_ref>-<slug>.md`` for the aware instant ``moment``."""
    stamp = moment.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{check_iter_ref(iter_ref)}-{check_slug(slug)}.md"


def parse_plan_name(filename: str) -> PlanName | None:
    """The parts of a plan file name, or None for any other file."""
    match = _NAME.fullmatch(filename)
    return None if match is None else PlanName(match.group(1), match.group(2), match.group(3))


def default_title(slug: str) -> str:
    """The title a plan gets without ``--title``: its slug's words, the first capitalised."""
    return slug.replace("-", " ").capitalize()


def plan_text(title: str) -> str:
    """A new plan's text: its H1 and one blank line. Raises InvalidValue for a title that
    is empty or spans lines."""
    clean = title.strip()
    if not clean or "\n" in clean or "\r" in clean:
        raise InvalidValue("the plan title must be one non-empty line")
    return f"# {clean}\n\n"
