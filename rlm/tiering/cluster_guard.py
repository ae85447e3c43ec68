"""One metadata store, one Kafka cluster: a sidecar refuses to tier or delete anything with a
store another cluster's sidecars claimed.

Two clusters pointed at one store (and one remote prefix) by mistake would meet in partitions of
the same name: each copier would take the other cluster's remote segments of ``orders-0`` for a
deleted topic's (another topic id) and retire them, deleting the other cluster's remote log. So
the first sidecar to use a store records its brokers' ``cluster.id`` (``meta.properties``) there
(:meth:`~rlm.metastore.MetadataStore.claim_cluster`), and every copier and retention pass first
checks that the store is its own cluster's. Log directories that name no cluster (a broker older
than ``cluster.id``, or not formatted yet) are not checked; a query tier has none. Nor are those
whose ``meta.properties`` cannot be read: they are offline, and their partitions neither tiered nor
expired (:mod:`rlm.log.broker_dirs`), while the others' are checked and worked on as ever.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rlm.errors import ClusterMismatchError
from rlm.log.identity import cluster_id_from_log_dirs
from rlm.metastore.protocol import MetadataStore


class ClusterGuard:
    """Checks, once per process (then from memory), that the store records this broker's cluster."""

    def __init__(self, store: MetadataStore, log_dirs: Sequence[Path], broker_id: int) -> None:
        self.store = store
        self.log_dirs = tuple(log_dirs)
        self.broker_id = broker_id
        self._checked: str | None = None
        """The cluster id found to be the store's."""

    def check(self) -> None:
        """Raises:
        ClusterMismatchError: the store records another cluster's remote tier.
        ConfigError: the log directories name two clusters.
        MetadataError: the store did not answer (the next pass asks again).
        """
        cluster_id = cluster_id_from_log_dirs(self.log_dirs)
        if cluster_id is None or cluster_id == self._checked:
            return
        claim = self.store.claim_cluster(cluster_id, self.broker_id)
        if claim.cluster_id != cluster_id:
            where = ", ".join(map(str, self.log_dirs))
            raise ClusterMismatchError(
                f"the metadata store records the remote tier of Kafka cluster {claim.cluster_id} "
                f"(claimed by broker {claim.broker_id}'s sidecar at {claim.claimed_at_ms} epoch ms), "
                f"but the log directories ({where}) are cluster {cluster_id}'s: nothing is tiered "
                "or deleted. Point metadata.url and remote.url at this cluster's own store"
            )
        self._checked = cluster_id
