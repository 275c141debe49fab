"""The bench's output: one table of medians and maxima with the targets beside them.

Never a verdict: the bench prints numbers, the reader compares (docs/benchmarks.md).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

HEADER = ("measure", "n", "median", "max", "target", "reference")


@dataclass(frozen=True)
class Row:
    """One table line. ``samples`` in the row's unit; an empty list makes a section title.

    ``peak``: the samples are one peak value, shown in the max column only, with ``count``
    (how many readings it summarises) as n. ``note``: a one-off value or "n/a", shown
    in place of the median.
    """

    label: str
    samples: list[float]
    unit: str = "ms"
    target: str = ""
    reference: str = ""
    peak: bool = False
    count: int | None = None
    note: str = ""  # a value that is not a sample (shown in the median column), e.g. "n/a"


def section(title: str) -> Row:
    """A title line without numbers."""
    return Row(title, [])


def _fmt(value: float, unit: str) -> str:
    return f"{value:.1f} {unit}" if value < 100 else f"{value:.0f} {unit}"


def _cells(row: Row) -> tuple[str, ...]:
    if row.note:
        return (row.label, str(row.count or 1), row.note, "", row.target, row.reference)
    if not row.samples:
        return (row.label, "", "", "", "", "")
    count = str(row.count if row.count is not None else len(row.samples))
    median = "" if row.peak else _fmt(statistics.median(row.samples), row.unit)
    return (row.label, count, median, _fmt(max(row.samples), row.unit), row.target,
            row.reference)


def render(rows: list[Row]) -> str:
    """The table as text: a header, then each row; numeric columns right-aligned."""
    table = [HEADER, *(_cells(r) for r in rows)]
    widths = [max(len(line[i]) for line in table if line[1]) for i in range(len(HEADER))]
    out: list[str] = []
    for number, line in enumerate(table):
        if number and not line[1]:  # a section title spans the line
            out.append(line[0])
            continue
        cells = [line[0].ljust(widths[0])]
        cells += [cell.rjust(width) for cell, width in zip(line[1:], widths[1:], strict=True)]
        out.append("  ".join(cells).rstrip())
        if number == 0:
            out.append("-" * len(out[-1]))
    return "\n".join(out)
