"""The copy leases a sidecar holds, taken and renewed on demand, shared by copier and retention.

Each process draws an incarnation id and records it in the leases it takes. A process that starts
takes its broker's leases over at once, even unexpired ones (a restarted sidecar fences whatever
its previous incarnation might still write). If the incarnation it replaced is still alive, a
second process was started with the same ``broker.id``: the older one finds its lease taken by its
own broker id, says so in a warning, and leaves the partition to the newer one until that lease
expires or is released, instead of taking it back (each take starts a new epoch, and two processes
retaking from each other would fence each other's writes forever).

Leases are not tied to leadership, so a holder whose broker's log stopped growing (the broker is
down, or a follower fell behind) would keep the lease and tier nothing new while the leader's
local retention deletes what was never tiered. At the start of each copier and retention pass
the keeper is told how far its broker's log reaches (:mod:`rlm.tiering.reach`): while another
broker holds the lease, it records a claim in the store; while another broker's live claim
(younger than the lease's time to live) is ahead of its log, it gives the lease up and does not
take it again. A claim grants nothing by itself: the claimer takes the lease as any other, and
every write stays fenced by the lease.

A broker whose sidecar does not hold a partition's lease asks for it at every pass, so that its
asking costs the store reads, not writes: a lease held by another is refused by a read, and a
claim is written when the position it names changes (a segment rolled, a new leader epoch) or it
has grown half a time to live old (:data:`CLAIM_REFRESHES_PER_TTL`). A write would lock the
partition's row, which the holder's writes lock too, and cost a commit. The holder renews its
lease at every pass and between the segments of a backlog, and writes it once a third of its
time to live has passed since the last write (:data:`RENEWALS_PER_TTL`): sooner, a read finds it
still current. A sidecar that cannot read its broker's ``partition.metadata`` or
``leader-epoch-checkpoint`` of a partition gives its lease up at once
(:meth:`LeaseKeeper.hold_partition`), rather than letting it expire.
"""

from __future__ import annotations

import logging
import threading
import uuid

from rlm.errors import CorruptCheckpointError, RlmError, StaleLeaseError
from rlm.log.logdir import PartitionDir
from rlm.metastore.model import Lease, LeaseClaim, TopicPartition
from rlm.metastore.protocol import MetadataStore
from rlm.metrics import Metrics
from rlm.tiering.reach import Reach
from rlm.tiering.reach import reach as log_reach

log = logging.getLogger("rlm.leases")
CLAIMS_KEPT_TTLS = 10
"""A claim is read only while younger than a lease's time to live; one this many times as old is
deleted when another broker claims the lease (a broker removed from the cluster claims no more)."""


CLAIM_REFRESHES_PER_TTL = 2
"""A claim of the same position is written again once it is a lease's time to live divided by
this old: the holder reads it while it is younger than that time to live, so it stays live, while
the passes in between (the copier's and retention's, every ``remote.log.manager.task.interval.ms``)
write nothing."""


RENEWALS_PER_TTL = 3
"""A held lease is written again once a lease's time to live divided by this has passed since it
was last taken or renewed: a renewal asked sooner (the copier's and retention's at the start of
their passes, the copier's between the segments of a backlog) is a read that finds it current,
and writes nothing. After any renewal the lease has at least 2/3 of its time to live left (40 s
of the default 60 s), the time a segment's upload has before the next renewal."""


class LeaseKeeper:
    """Takes, renews, forgets and releases the partition leases of one broker's sidecar process."""

    def __init__(
        self,
        store: MetadataStore,
        broker_id: int,
        ttl_ms: int,
        *,
        incarnation: uuid.UUID | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.store = store
        self.broker_id = broker_id
        self.ttl_ms = ttl_ms
        self.incarnation = incarnation if incarnation is not None else uuid.uuid4()
        """This process's id in the leases it takes."""
        self._leases: dict[TopicPartition, Lease] = {}
        self._taking: dict[TopicPartition, threading.Lock] = {}
        self._yielded: set[TopicPartition] = set()
        """Partitions another live process of this broker id took from this one."""
        self._outrun: dict[TopicPartition, LeaseClaim] = {}
        """Partitions left to another broker, whose claim is ahead of this broker's log."""
        self.metrics = metrics
        """Counts the leases given up to a claim ahead (none counted without)."""
        self._lock = threading.Lock()

    def hold(self, tp: TopicPartition, reach: Reach | None = None) -> Lease | None:
        """Renew the lease of ``tp`` if held, else try to take it; None while another broker (or
        another process of this broker id, which took it from this one) holds it.

        With ``reach``, how far this broker's log of ``tp`` reaches (told at the start of a pass),
        the claims decide too: while another broker's claim younger than the lease's time to live
        is ahead of the log, the lease is given up if held (a warning, ``rlm_lease_yields_total``)
        and not taken, and without ``reach`` (a renewal within a pass) it is not taken either
        until a call with one finds no claim ahead; while another broker holds the lease, this
        broker claims it.

        Calls for one partition are serialized: the copier and retention loops ask at the same
        time, and two takes would each start a new lease epoch, fencing the other's writes.

        Raises:
            MetadataError: the store failed (a lease being given up then expires instead).
        """
        with self._lock:
            taking = self._taking.setdefault(tp, threading.Lock())
        with taking:
            if reach is None:
                with self._lock:
                    if tp in self._outrun:
                        return None
                return self._hold(tp)
            ahead = self._claim_ahead(tp, reach)
            with self._lock:
                if ahead is None:
                    self._outrun.pop(tp, None)
                else:
                    self._outrun[tp] = ahead
            if ahead is not None:
                self._give_way(tp, ahead, reach)
                return None
            lease = self._hold(tp)
            if lease is None:
                self.store.claim_lease(
                    tp,
                    self.broker_id,
                    reach.tierable,
                    forget_after_ms=CLAIMS_KEPT_TTLS * self.ttl_ms,
                    refresh_after_ms=self.ttl_ms // CLAIM_REFRESHES_PER_TTL,
                )
            return lease

    def hold_partition(self, partition: PartitionDir) -> Lease | None:
        """:meth:`hold` at the start of a pass, with how far this broker's log of ``partition``
        reaches (:func:`~rlm.tiering.reach.reach`).

        Raises:
            CorruptCheckpointError: the broker's ``partition.metadata`` or ``leader-epoch-checkpoint``
                of it cannot be parsed. A lease held is given up first, with a warning: this broker
                cannot tier the partition, and another replica's sidecar takes it at its next pass
                rather than once it expires.
            MetadataError: the store failed.
        """
        tp = TopicPartition(partition.topic, partition.partition)
        try:
            position = log_reach(partition)
        except CorruptCheckpointError as exc:
            self._give_up_unreadable(tp, exc)
            raise
        return self.hold(tp, position)

    def _give_up_unreadable(self, tp: TopicPartition, exc: CorruptCheckpointError) -> None:
        with self._lock:
            lease = self._leases.pop(tp, None)
        if lease is None:
            return
        try:
            released = self.store.release_lease(lease)
        except RlmError as failed:
            log.warning("%s: giving the copy lease up failed (it expires instead): %s", tp, failed)
            return
        if released:
            log.warning(
                "%s: this broker's files of it cannot be read (%s): the copy lease is given up, for "
                "another replica's sidecar to take",
                tp,
                exc,
            )

    def _claim_ahead(self, tp: TopicPartition, reach: Reach) -> LeaseClaim | None:
        """The live claim of another broker furthest ahead of this broker's log, if any is."""
        ahead = [
            claim
            for claim in self.store.lease_claims(tp, max_age_ms=self.ttl_ms)
            if claim.broker_id != self.broker_id and reach.outrun_by(claim.position)
        ]
        return max(ahead, key=lambda c: (c.position.leader_epoch, c.position.offset), default=None)

    def _give_way(self, tp: TopicPartition, claim: LeaseClaim, reach: Reach) -> None:
        """Give the lease of ``tp`` up, if held, to the broker of ``claim``, and say so."""
        with self._lock:
            lease = self._leases.pop(tp, None)
        if lease is None or not self.store.release_lease(lease):
            return
        if self.metrics is not None:
            self.metrics.lease_yields.labels(tp.topic, str(tp.partition)).inc()
        log.warning(
            "%s: broker %d's log is ahead of this broker's: it could tier up to offset %d of leader "
            "epoch %d, this broker's log ends at offset %d of leader epoch %d (this broker is down, "
            "or behind the leader); the copy lease is given up to broker %d",
            tp,
            claim.broker_id,
            claim.position.offset,
            claim.position.leader_epoch,
            reach.held.offset,
            reach.held.leader_epoch,
            claim.broker_id,
        )

    def _hold(self, tp: TopicPartition) -> Lease | None:
        with self._lock:
            held = self._leases.get(tp)
            yielded = tp in self._yielded
        lease = None
        if held is not None:
            try:
                lease = self.store.renew_lease(
                    held, self.ttl_ms, refresh_after_ms=self.ttl_ms // RENEWALS_PER_TTL
                )
            except StaleLeaseError:
                yielded = self._taken_from_us(tp)
        if lease is None:
            lease = self.store.acquire_lease(
                tp,
                self.broker_id,
                self.ttl_ms,
                incarnation=self.incarnation,
                replace_own_incarnation=not yielded,
            )
        with self._lock:
            if lease is None:
                self._leases.pop(tp, None)
            else:
                self._leases[tp] = lease
                self._yielded.discard(tp)
        return lease

    def _taken_from_us(self, tp: TopicPartition) -> bool:
        """After a renewal was refused: whether another process of this broker id took the lease
        (then this one yields it), with a warning saying so."""
        current = self.store.get_lease(tp)
        if current is None or current.owner != self.broker_id or current.incarnation == self.incarnation:
            return False
        with self._lock:
            self._yielded.add(tp)
        log.warning(
            "another process with broker.id %d (incarnation %s) took the copy lease of %s from this one "
            "(incarnation %s); this process leaves %s to it until that lease expires or is released. "
            "If that is not a restart of this sidecar, two sidecars run with broker.id %d: stop one.",
            self.broker_id,
            current.incarnation,
            tp,
            self.incarnation,
            tp,
            self.broker_id,
        )
        return True

    def keep(self, tp: TopicPartition, lease: Lease, doing: str) -> Lease:
        """Renew ``lease`` of ``tp`` within a pass (:meth:`hold`); returns the lease to fence the
        next write with.

        Raises:
            StaleLeaseError: the lease held now is of another epoch than ``lease``: it expired, and
                another holder took it and gave it back meanwhile, and may have changed what the
                pass planned under ``lease`` (the message says the pass was ``doing`` it).
            MetadataError: the store failed.
        """
        renewed = self.hold(tp)
        if renewed is not None and renewed.epoch != lease.epoch:
            raise StaleLeaseError(
                f"{tp}: the copy lease was taken over while {doing} (epoch {lease.epoch}, now "
                f"{renewed.epoch}): what was planned under it may be stale; the next run plans again"
            )
        return renewed or lease

    def forget(self, tp: TopicPartition) -> None:
        """Drop a lease found to be stale."""
        with self._lock:
            self._leases.pop(tp, None)

    def release(self, tp: TopicPartition) -> None:
        """Give up the lease of ``tp``, if held, so another sidecar can take it at once.

        Raises:
            MetadataError: the store failed the release (the lease then expires instead).
        """
        with self._lock:
            lease = self._leases.pop(tp, None)
        if lease is not None:
            self.store.release_lease(lease)

    def holder(self, tp: TopicPartition) -> str:
        """Who holds the lease of ``tp``, in words."""
        lease = self.store.get_lease(tp)
        if lease is None:
            who = "nobody"
        elif lease.owner == self.broker_id and lease.incarnation != self.incarnation:
            who = f"another process with broker.id {lease.owner} (incarnation {lease.incarnation})"
        else:
            who = f"broker {lease.owner}"
        with self._lock:
            ahead = self._outrun.get(tp)
        if ahead is None:
            return who
        return f"{who} (this broker leaves it to broker {ahead.broker_id}, whose log is ahead)"

    def release_all(self) -> None:
        """Give up every lease (on shutdown) so another sidecar can take over at once."""
        with self._lock:
            leases, self._leases = list(self._leases.values()), {}
        for lease in leases:
            try:
                self.store.release_lease(lease)
            except RlmError as exc:
                log.warning("releasing the lease of %s failed: %s", lease.topic_partition, exc)
