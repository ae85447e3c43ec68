"""How far a broker's log of a partition reaches, as the copy lease claims compare it.

Leases are not tied to leadership: any replica's sidecar may hold a partition's copy lease. A
holder whose log stopped growing (its broker is down, or a follower fell behind) tiers nothing
new, while the leader's local retention deletes segments that were never tiered. So a sidecar
that wants the lease while another broker holds it claims it with the last offset it could tier,
and the holder gives the lease up to a claim ahead of its own log (:mod:`rlm.tiering.leases`).

The claim's offset is what the claimer could tier: the last offset of its last rolled segment
below its high watermark (the copier's own rule). The holder compares it with the last offset its
log holds, not with what it could tier itself: replicas roll their segments at offsets of their
own, so between two healthy replicas what each could tier leads by turns, and the lease would
move at every roll. A holder yields only to a claimer that could tier records it does not hold
(or that has a newer leader epoch: a leader elected since); one that holds them tiers them as
soon as it rolls past them. Equal logs never yield either way.
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

from rlm.log.checkpoints import topic_id_to_uuid
from rlm.log.logdir import PartitionDir
from rlm.metastore.model import LogPosition


class Reach(NamedTuple):
    """How far a broker's log of one partition reaches, at its latest leader epoch."""

    tierable: LogPosition
    """The last offset it could tier (-1: none): what it claims the lease with."""
    held: LogPosition
    """The last offset it holds (-1: none): a claim ahead of it takes the lease."""

    def outrun_by(self, claim: LogPosition) -> bool:
        """Whether a replica claiming ``claim`` could tier what this log does not hold."""
        return claim.ahead_of(self.held)


def reach(partition: PartitionDir) -> Reach:
    """How far the broker's log of ``partition`` reaches now.

    Raises:
        CorruptCheckpointError: ``partition.metadata`` or ``leader-epoch-checkpoint`` cannot be
            parsed (the message names the file).
    """
    text = partition.topic_id()
    topic_id = None if text is None else topic_id_to_uuid(text)
    epochs = partition.leader_epochs()
    epoch = epochs[-1].epoch if epochs else -1
    high_watermark = partition.high_watermark()
    tierable = -1
    if high_watermark is not None:
        for _, following in itertools.pairwise(partition.segments()):
            end = following.base_offset - 1
            if end >= high_watermark:
                break
            tierable = end
    return Reach(
        LogPosition(topic_id, epoch, tierable),
        LogPosition(topic_id, epoch, partition.log_end_offset() - 1),
    )
