"""Which offsets reads answer from a remote copy: up to where another copy or the broker's log
answers.

Only a diverged copy kept past a cut ends before its last offset: one trimmed there whose batch
holding offsets on both sides of the broker's first local offset is kept whole
(:mod:`rlm.tiering.trim`), or one kept as it is (cut there it would be the same copy, or its bytes
fail the checks: :mod:`rlm.tiering.lineage_keeper`). The old leader's records past that offset
are not the log's: the broker's log answers from there, then the copy of it that reaches past
the kept one. Reads give the batch across the cut out cut short (:mod:`rlm.log.clip`).
"""

from __future__ import annotations

from rlm.log.logdir import PartitionDir
from rlm.lookup.service import LookupService
from rlm.metastore.model import RemoteSegment, TopicPartition


def remote_answer_end(
    service: LookupService, tp: TopicPartition, local: PartitionDir | None, segment: RemoteSegment
) -> int:
    """The last offset reads answer from ``segment``: its end, or the offset before the first
    that another copy or the broker's log answers for, whichever comes first (module docstring).

    Raises:
        MetadataUnavailableError: the metadata store does not answer.
    """
    last = segment.end_offset
    segments = local.segments() if local is not None else []
    if segments:
        last = min(last, segments[0].base_offset - 1)
    following = service.remote_segment_for_offset(tp, local, last)
    if following is not None and following.start_offset > segment.start_offset:
        last = min(last, following.start_offset - 1)
    return last
