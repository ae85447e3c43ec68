"""The copy leases a sidecar holds, taken and renewed on demand, shared by copier and retention.

Each process draws an incarnation id and records it in the leases it takes. A process that starts
takes its broker's leases over at once, even unexpired ones (a restarted sidecar fences whatever
its previous incarnation might still write). If the incarnation it replaced is still alive, a
second process was started with the same ``broker.id``: the older one finds its lease taken by its
own broker id, says so in a warning, and leaves the partition to the newer one until that lease
expires or is released, instead of taking it back (each take starts a new epoch, and two processes
retaking from each other would fence each other's writes forever).
"""

from __future__ import annotations

import logging
import threading
import uuid

from rlm.errors import RlmError, StaleLeaseError
from rlm.metastore.model import Lease, TopicPartition
from rlm.metastore.protocol import MetadataStore

log = logging.getLogger("rlm.leases")


class LeaseKeeper:
    """Takes, renews, forgets and releases the partition leases of one broker's sidecar process."""

    def __init__(
        self, store: MetadataStore, broker_id: int, ttl_ms: int, *, incarnation: uuid.UUID | None = None
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
        self._lock = threading.Lock()

    def hold(self, tp: TopicPartition) -> Lease | None:
        """Renew the lease of ``tp`` if held, else try to take it; None while another broker (or
        another process of this broker id, which took it from this one) holds it.

        Calls for one partition are serialized: the copier and retention loops ask at the same
        time, and two takes would each start a new lease epoch, fencing the other's writes.
        """
        with self._lock:
            taking = self._taking.setdefault(tp, threading.Lock())
        with taking:
            return self._hold(tp)

    def _hold(self, tp: TopicPartition) -> Lease | None:
        with self._lock:
            held = self._leases.get(tp)
            yielded = tp in self._yielded
        lease = None
        if held is not None:
            try:
                lease = self.store.renew_lease(held, self.ttl_ms)
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
            return "nobody"
        if lease.owner == self.broker_id and lease.incarnation != self.incarnation:
            return f"another process with broker.id {lease.owner} (incarnation {lease.incarnation})"
        return f"broker {lease.owner}"

    def release_all(self) -> None:
        """Give up every lease (on shutdown) so another sidecar can take over at once."""
        with self._lock:
            leases, self._leases = list(self._leases.values()), {}
        for lease in leases:
            try:
                self.store.release_lease(lease)
            except RlmError as exc:
                log.warning("releasing the lease of %s failed: %s", lease.topic_partition, exc)
