"""Benchmark of what a broker's sidecar asks of the metadata store for the partitions whose copy
lease another broker's sidecar holds; prints JSON.

In a cluster of replication factor 3, each sidecar holds the leases of about a third of its
partitions (those its broker leads) and asks for the others' at every copier and retention pass
(:meth:`rlm.tiering.leases.LeaseKeeper.hold`): it claims them, and takes one when its holder is
gone. Here broker 1 holds the leases of ``--partitions`` partitions, and broker 2's keeper asks
for each of them at ``--passes`` passes, a quarter of the lease's time to live apart (the
settings' default: passes every 30 s, leases of 60 s; the store's clock is moved, not waited
for), while broker 1's keeper renews them as often. Reported per partition and pass of the
follower (and, ``holder_*``, the holder's writes per renewal), on PostgreSQL (the local server, a new
database) and SQLite: the statements that write or lock (``INSERT``/``UPDATE``/``DELETE``,
``SELECT ... FOR UPDATE``, SQLite's ``BEGIN IMMEDIATE``), the transactions committed that wrote,
all statements, and the wall time. Compare two checkouts by running this file in each.

    .venv/bin/python bench/leases.py [--partitions 300] [--passes 8]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from sqlalchemy import event

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.metadata import bench_database
from metadata.schema import upgrade
from metadata.store import SqlMetadataStore
from rlm.metastore import LogPosition, TopicPartition
from rlm.tiering.leases import LeaseKeeper
from rlm.tiering.reach import Reach

TTL_MS = 60_000
PASS_MS = TTL_MS // 2 // 2
"""Copier and retention passes, each every 30 s by default: one ask each 15 s."""
WRITING = ("INSERT", "UPDATE", "DELETE", "BEGIN IMMEDIATE")


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


def follower_passes(url: str, partitions: int, passes: int) -> dict[str, Any]:
    """Broker 2 asking at each pass for the leases broker 1 holds, measured."""
    upgrade(url)
    clock = Clock()
    store = SqlMetadataStore.open(url, clock=clock)
    try:
        topic_id = uuid.uuid4()
        tps = [TopicPartition("orders", p) for p in range(partitions)]
        leader = Reach(LogPosition(topic_id, 4, 999), LogPosition(topic_id, 4, 1_002))
        follower_reach = Reach(LogPosition(topic_id, 4, 499), LogPosition(topic_id, 4, 502))
        holder = LeaseKeeper(store, 1, TTL_MS)
        follower = LeaseKeeper(store, 2, TTL_MS)
        for tp in tps:
            assert holder.hold(tp, leader) is not None
        statements: list[str] = []
        commits = [0]
        writing = [False]

        def count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
            statements.append(statement)
            writing[0] = writing[0] or any(mark in statement.upper() for mark in WRITING)

        def committed(_conn: Any) -> None:
            commits[0] += writing[0]
            writing[0] = False

        event.listen(store.engine, "before_cursor_execute", count)
        event.listen(store.engine, "commit", committed)
        laps = []
        held = []
        try:
            for _ in range(passes):
                clock.now += PASS_MS
                del statements[:]
                commits[0] = 0
                for tp in tps:  # the holder renews, as its own passes do
                    holder.hold(tp, leader)
                held.append((sum(any(m in s.upper() for m in WRITING) for s in statements), commits[0]))
                del statements[:]
                commits[0] = 0
                started = time.perf_counter()
                for tp in tps:
                    assert follower.hold(tp, follower_reach) is None
                laps.append(
                    (
                        time.perf_counter() - started,
                        sum(any(m in s.upper() for m in WRITING) for s in statements),
                        commits[0],
                        len(statements),
                    )
                )
        finally:
            event.remove(store.engine, "before_cursor_execute", count)
            event.remove(store.engine, "commit", committed)
        asks = partitions * passes
        return {
            "asks": asks,
            "writing_statements_per_ask": round(sum(lap[1] for lap in laps) / asks, 3),
            "writing_commits_per_ask": round(sum(lap[2] for lap in laps) / asks, 3),
            "statements_per_ask": round(sum(lap[3] for lap in laps) / asks, 3),
            "us_per_ask": round(sum(lap[0] for lap in laps) / asks * 1e6, 1),
            "us_per_ask_by_pass": [round(lap[0] / partitions * 1e6, 1) for lap in laps],
            "holder_writing_statements_per_ask": round(sum(h[0] for h in held) / asks, 3),
            "holder_writing_commits_per_ask": round(sum(h[1] for h in held) / asks, 3),
        }
    finally:
        store.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=300)
    parser.add_argument("--passes", type=int, default=8)
    args = parser.parse_args()
    result: dict[str, Any] = {"partitions": args.partitions, "passes": args.passes}
    with bench_database(None) as url:
        result["postgresql"] = follower_passes(url, args.partitions, args.passes)
    with tempfile.TemporaryDirectory(prefix="rlm-bench-leases-") as tmp:
        result["sqlite"] = follower_passes(f"sqlite:///{tmp}/metadata.db", args.partitions, args.passes)
    result["loadavg"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
