"""What the agent sees each step: prompt assembly and envsubst-style rendering.

NODE.md, the step body and the active mode documents
are joined in order, then rendered in one pass with ``$VAR`` / ``${VAR}`` substitution that
matches GNU ``envsubst`` restricted to a known variable set.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

__all__ = ["assemble_prompt", "iter_label", "iter_ref", "render"]

# ``${NAME}`` or ``$NAME``; the identifier is greedy, exactly as envsubst reads it.
_PLACEHOLDER = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def render(template: str, variables: Mapping[str, str]) -> str:
    """Substitute known variables in ``template`` in one pass (docs/loop.md, "Rendering").

    ``$NAME`` and ``${NAME}`` (NAME = ``[A-Za-z_][A-Za-z0-9_]*``, read greedily) are replaced
    by ``variables[NAME]`` when NAME is a key. Everything else passes through verbatim: unknown
    names, ``$$``, ``$1``, ``${}``, ``${NAME:-x}``, an unclosed ``${NAME`` and a lone ``$``.
    As in GNU envsubst, ``$`` is no escape: ``$$NAME`` renders as ``$`` plus the value.
    Substituted values are never scanned again. Returns the rendered text; never raises.
    """

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        value = variables.get(name)
        return match.group(0) if value is None else value

    return _PLACEHOLDER.sub(substitute, template)


def assemble_prompt(node_md: str, step_body: str, modes: Sequence[str]) -> str:
    """Join the prompt parts in order: NODE.md, the step body, then each mode document.

    Each part loses its trailing whitespace; parts left empty are skipped; the rest are
    separated by one blank line and the result ends with exactly one newline (``""`` when
    every part is empty). Render the result with ``render`` afterwards.
    """
    parts = [part.rstrip() for part in (node_md, step_body, *modes)]
    kept = [part for part in parts if part]
    return "\n\n".join(kept) + "\n" if kept else ""


def iter_label(iteration: int, max_iters: int | None) -> str:
    """The ``ITER_LABEL`` variable: ``3 of 10``, or ``3 (no limit)`` when ``max_iters`` is None."""
    if max_iters is None:
        return f"{iteration} (no limit)"
    return f"{iteration} of {max_iters}"


def iter_ref(run_id: int, iteration: int) -> str:
    """The run-qualified iteration reference ``<run>.<iter>`` (``ITER_REF``), e.g. ``2.3``."""
    return f"{run_id}.{iteration}"
