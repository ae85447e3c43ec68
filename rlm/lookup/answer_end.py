"""Which offsets reads answer from a remote copy: up to where another copy or the broker's log
answers.

Only a diverged copy kept past a cut ends before its last offset: one trimmed there whose batch
holding offsets on both sides of the broker's first local offset is kept whole
(:mod:`rlm.tiering.trim`), or one kept as it is (cut there it would be the same copy, or its bytes
fail the checks: :mod:`rlm.tiering.lineage_keeper`). The old leader's records past that offset
are not the log's: the broker's log answers from there, then the copy of it that reaches past
the kept one. Reads give the batch across the cut out cut short (:mod:`rlm.log.clip`), and a
timestamp lookup neither answers with nor looks at its records past the cut
(:meth:`rlm.lookup.service.LookupService.search`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from rlm.log.logdir import PartitionDir
from rlm.metastore.model import RemoteSegment, TopicPartition

if TYPE_CHECKING:  # the lookup service asks this module too
    from rlm.lookup.service import LookupService

Holding = Callable[[int], RemoteSegment | None]
"""The finished copy holding an offset, the last in offset order when several do
(:meth:`~rlm.metastore.protocol.MetadataStore.segment_for_offset`), or None."""


class AnswerEnd(NamedTuple):
    """Where reads stop answering from a copy, and who answers from the next offset."""

    last: int
    """The last offset reads answer from the copy."""
    following: RemoteSegment | None
    """The copy answering from ``last + 1`` when one starts inside this copy; None when the copy
    answers to its end or the broker's log answers from there."""


def answer_end(segment: RemoteSegment, local_base: int | None, holding: Holding) -> AnswerEnd:
    """Where reads stop answering from ``segment``: its end, or the offset before the first that
    another copy or the broker's log (its first segment starting at ``local_base``, None without
    one) answers for, whichever comes first (module docstring).

    Raises:
        whatever ``holding`` raises.
    """
    last = segment.end_offset if local_base is None else min(segment.end_offset, local_base - 1)
    following = holding(last)
    if following is not None and following.start_offset > segment.start_offset:
        return AnswerEnd(min(last, following.start_offset - 1), following)
    return AnswerEnd(last, None)


def remote_answer_end(
    service: LookupService, tp: TopicPartition, local: PartitionDir | None, segment: RemoteSegment
) -> int:
    """The last offset reads answer from ``segment`` (:func:`answer_end`), the copies that follow
    it asked of the metadata store.

    Raises:
        MetadataUnavailableError: the metadata store does not answer.
    """
    segments = local.segments() if local is not None else []
    local_base = segments[0].base_offset if segments else None
    return answer_end(
        segment, local_base, lambda offset: service.remote_segment_for_offset(tp, local, offset)
    ).last
