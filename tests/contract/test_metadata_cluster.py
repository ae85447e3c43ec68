"""Contract of the store's cluster claim (``rlm_cluster``), on SQLite and PostgreSQL."""

from __future__ import annotations

import threading

from metadata.store import SqlMetadataStore
from rlm.metastore import ClusterClaim
from tests.clock import FakeClock
from tests.metadata_support import open_store


def test_the_first_claim_is_recorded_and_every_later_one_is_told_it(
    store: SqlMetadataStore, clock: FakeClock[int]
) -> None:
    first = store.claim_cluster("MkU3OEVBNTcwNTJENDM2Qk", 1)
    clock.advance(5_000)

    assert first == ClusterClaim("MkU3OEVBNTcwNTJENDM2Qk", 1, clock.now - 5_000)
    assert store.claim_cluster("MkU3OEVBNTcwNTJENDM2Qk", 2) == first  # the same cluster's other broker
    assert store.claim_cluster("another-cluster", 7) == first  # another cluster is told whose it is


def test_concurrent_first_claims_agree_on_one(database_url: str, clock: FakeClock[int]) -> None:
    stores = [open_store(database_url, clock) for _ in range(4)]
    found: list[ClusterClaim] = []
    start = threading.Barrier(len(stores))

    def claim(store: SqlMetadataStore, number: int) -> None:
        start.wait()
        found.append(store.claim_cluster(f"cluster-{number}", number))

    threads = [threading.Thread(target=claim, args=(s, n)) for n, s in enumerate(stores)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for store in stores:
        store.close()

    assert len(found) == 4 and len(set(found)) == 1
    (winner,) = set(found)
    assert winner.cluster_id == f"cluster-{winner.broker_id}"
