"""The copy leases a sidecar holds, taken and renewed on demand, shared by copier and retention."""

from __future__ import annotations

import logging
import threading

from rlm.errors import RlmError, StaleLeaseError
from rlm.metastore.model import Lease, TopicPartition
from rlm.metastore.protocol import MetadataStore

log = logging.getLogger(__name__)


class LeaseKeeper:
    """Takes, renews, forgets and releases the partition leases of one broker's sidecar."""

    def __init__(self, store: MetadataStore, broker_id: int, ttl_ms: int) -> None:
        self.store = store
        self.broker_id = broker_id
        self.ttl_ms = ttl_ms
        self._leases: dict[TopicPartition, Lease] = {}
        self._taking: dict[TopicPartition, threading.Lock] = {}
        self._lock = threading.Lock()

    def hold(self, tp: TopicPartition) -> Lease | None:
        """Renew the lease of ``tp`` if held, else try to take it; None while another broker holds it.

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
        lease = None
        if held is not None:
            try:
                lease = self.store.renew_lease(held, self.ttl_ms)
            except StaleLeaseError:
                lease = None
        if lease is None:
            lease = self.store.acquire_lease(tp, self.broker_id, self.ttl_ms)
        with self._lock:
            if lease is None:
                self._leases.pop(tp, None)
            else:
                self._leases[tp] = lease
        return lease

    def forget(self, tp: TopicPartition) -> None:
        """Drop a lease found to be stale."""
        with self._lock:
            self._leases.pop(tp, None)

    def holder(self, tp: TopicPartition) -> str:
        """Who holds the lease of ``tp``, in words."""
        lease = self.store.get_lease(tp)
        return f"broker {lease.owner}" if lease is not None else "nobody"

    def release_all(self) -> None:
        """Give up every lease (on shutdown) so another sidecar can take over at once."""
        with self._lock:
            leases, self._leases = list(self._leases.values()), {}
        for lease in leases:
            try:
                self.store.release_lease(lease)
            except RlmError as exc:
                log.warning("releasing the lease of %s failed: %s", lease.topic_partition, exc)
