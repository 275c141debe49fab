"""The step kinds, as one static table: ``table.KINDS`` lists them in claim order.

The iteration runner asks each row in turn whether it claims a step (from the step's
frontmatter); the first that does runs it, after the SYNC pseudo-step when it asks for
one. A row whose ``run`` returns None passes the step on to the next row that claims it
(the children wait, once released). The agent step claims every step, so it is the last
row: the fallback.

A new kind is one module under ``runtime/kinds/`` with a ``KindPart`` class of the
``StepKind`` shape (``base.py``) and one row in ``table.py``.
"""
