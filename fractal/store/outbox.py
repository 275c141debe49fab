"""Notices: what the loop posts to a node's ``outbox`` so the node's ancestors see it in
their radio feed. Each is priority 7 and sent by the node itself: every run's end
(``run completed|stopped|exited: <reason>``, with the run's spend), every approval gate
that starts waiting (the approve command and a diffstat), a merge and a hand-back. The
texts are composed by ``domain.radio``; the rows are ``store.radio`` messages.
"""

from __future__ import annotations

from fractal.domain.radio import NOTICE_PRIORITY, Channel, run_end_notice
from fractal.domain.run.reasons import clip_reason
from fractal.store.db import Tx
from fractal.store.radio import Draft, Radio, insert_message
from fractal.store.rows import MessageRow

OUTBOX = Channel.OUTBOX.value
EXIT_NOTICE_PRIORITY = NOTICE_PRIORITY  # every exited run posts to the node's outbox

__all__ = ["EXIT_NOTICE_PRIORITY", "OUTBOX", "Outbox", "insert_exit_notice", "insert_notice"]


class Outbox(Radio):
    """Posting the loop's notices (and, inherited, every radio read and write)."""

    def post_notice(self, node: str, subject: str, body: str = "") -> str:
        """Post a notice (priority 7, subject clipped like a reason) to ``node``'s outbox;
        return its 8-hex id."""
        with self._db() as tx:
            return insert_notice(tx, node, subject, body)

    def post_exit_notice(self, node: str, reason: str, figures: str = "") -> str:
        """Post ``run exited: <reason>`` to ``node``'s outbox (``figures``, a capped run's
        spend, join the body); return its id."""
        with self._db() as tx:
            return insert_exit_notice(tx, node, reason, figures)

    def post_run_end_notice(self, node: str, run_id: int, status: str, reason: str,
                            figures: str = "") -> str:
        """Post ``run <status>: <reason>`` to ``node``'s outbox, its body naming the run's
        spend (USD over the run's subtree; ``unknown`` when no step recorded a cost) and a
        capped run's ``figures``; return its id."""
        subject, body = self.run_end_draft(run_id, status, reason, figures)
        return self.post_notice(node, subject, body)

    def messages(self, node: str, channel: str = OUTBOX) -> list[MessageRow]:
        """``node``'s messages on ``channel``, newest first (unsent ones included)."""
        return self._all(MessageRow, "SELECT * FROM messages WHERE node = :node AND "
                         "channel = :channel ORDER BY message_id DESC",
                         {"node": node, "channel": channel})

    def run_end_draft(self, run_id: int, status: str, reason: str,
                      figures: str = "") -> tuple[str, str]:
        """The (subject, body) of a run's end notice, spend included, for a move that
        posts it in the same transaction as the status flip (``Ledger.move(notice=)``)."""
        # deferred: start-up cost (2 modules)
        from fractal.store.spend import run_and_iteration_spend

        # The pooled connection (a supervisor closing its run): a read-only one opened
        # for this one read parsed the schema anew, the run's last spike of memory.
        spend = run_and_iteration_spend(self.db_path, run_id, None)[0]
        return run_end_notice(status, reason, run_id=run_id,
                              spend=None if spend.untracked else spend.usd,
                              unpriced=spend.unpriced, figures=figures)


def insert_notice(tx: Tx, node: str, subject: str, body: str) -> str:
    """``post_notice`` inside the caller's transaction."""
    return insert_message(tx, Draft(host=node, channel=OUTBOX, sender=node,
                                      subject=clip_reason(subject), data=body,
                                      priority=NOTICE_PRIORITY))


def insert_exit_notice(tx: Tx, node: str, reason: str, figures: str = "") -> str:
    """``post_exit_notice`` inside the caller's transaction."""
    return insert_notice(tx, node, f"run exited: {reason}",
                         f"{reason}\n{figures}" if figures else reason)
