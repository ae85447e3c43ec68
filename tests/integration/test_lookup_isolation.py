"""KIP-1075 isolation of ListOffsets (design: "Reader pool"): a slow remote tier delays nothing but
the lookups that read it.

The remote store sits behind a seam whose ranged reads wait on a gate: while it is closed the
remote tier is slower than any timeout here (a real one answering in 2 s, say). Then:

* lookups answered from the local tier or from metadata answer normally, even with every reader
  thread stuck in a remote read and the queue full;
* remote lookups end with REQUEST_TIMED_OUT at their request's timeout, count an expiration of
  their partition, and their tasks are cancelled: a queued one never runs;
* a full queue rejects a remote lookup at once with THROTTLING_QUOTA_EXCEEDED (89);
* ``BoundedPool.resize`` and ``RequestTimeout.default_ms`` take effect on a live pool.

Nothing here is timed: the tests wait on events and counters, each wait bounded by ``WAIT`` only
so that a broken behaviour fails instead of hanging.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rlm.bootstrap import Runtime
from rlm.errors import StorageUnavailableError
from rlm.log.logdir import LogDir
from rlm.lookup.list_offsets import (
    ErrorCode,
    ListOffsetsRequest,
    ListOffsetsResponse,
    PartitionQuery,
    PartitionResult,
    TopicQuery,
)
from rlm.metastore.model import TopicPartition
from rlm.storage.delegate import DelegatingStorage
from rlm.storage.protocol import RemoteStorage
from tests.lookup_support import (
    TOPIC,
    Backend,
    BatchPlan,
    Expected,
    PartitionPlan,
    Truth,
    runtime,
    tier_partition,
    write_partitions,
)

WAIT = 10.0
"""Upper bound for something that must happen; reached only when the behaviour is broken."""
TIMEOUT_MS = 500
"""The remote lookups' own request timeout."""
COLD_MS = int(WAIT * 1000)
"""The timeout of the fixture's warm-up lookups: a cold start is not what is tested here."""
REMOTE = TopicPartition(TOPIC, 0)
"""Tiered, its older segments deleted locally: early timestamps are only on the remote tier."""
LOCAL = TopicPartition(TOPIC, 1)
"""Never tiered."""


class GatedStorage(DelegatingStorage):
    """A :class:`RemoteStorage` seam: ranged reads wait while the gate is closed; the rest delegates."""

    def __init__(self, inner: RemoteStorage) -> None:
        super().__init__(inner)
        self.gate = threading.Event()
        self.gate.set()
        self._lock = threading.Lock()
        self.reads: list[str] = []
        """Keys of the ranged reads issued, in order."""
        self.waiting = 0
        """Reads waiting at the gate now."""

    @property
    def log_reads(self) -> int:
        with self._lock:
            return sum(key.endswith(".log") for key in self.reads)

    def read_range(self, key: str, start: int, length: int) -> bytes:
        with self._lock:
            self.reads.append(key)
            self.waiting += 1
        try:
            if not self.gate.wait(WAIT):
                raise StorageUnavailableError("the test never opened the gate", key=key)
        finally:
            with self._lock:
                self.waiting -= 1
        return self.inner.read_range(key, start, length)

    def close(self) -> None:
        self.gate.set()
        self.inner.close()


def wait_until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.005)


@dataclass
class Sidecar:
    runtime: Runtime
    storage: GatedStorage
    truths: dict[int, Truth]

    def ask(self, tp: TopicPartition, timestamp: int, timeout_ms: int | None = TIMEOUT_MS) -> PartitionResult:
        return self.runtime.list_offsets.find_one(tp, timestamp, timeout_ms)

    def expected(self, tp: TopicPartition, timestamp: int) -> Expected:
        truth = self.truths[tp.partition]
        return truth.special(timestamp) if timestamp < 0 else truth.for_timestamp(timestamp)

    def remote_timestamp(self) -> int:
        """A timestamp whose answer lies only on the remote tier."""
        truth = self.truths[REMOTE.partition]
        first = truth.records[2].record
        assert first.offset < truth.local_start_offset
        return first.timestamp

    def local_timestamps(self) -> list[int]:
        """Timestamps of the tiered partition answered from local segments without a remote read."""
        max_remote = self.runtime.store.max_timestamp(REMOTE)
        assert max_remote is not None
        return [max_remote + 1, max_remote + 3_000]

    def expirations(self) -> float:
        value = self.runtime.metrics.registry.get_sample_value(
            "rlm_remote_list_offsets_expirations_total", {"topic": TOPIC, "partition": "0"}
        )
        return value or 0.0

    def rejections(self) -> float:
        value = self.runtime.metrics.registry.get_sample_value(
            "rlm_pool_tasks_rejected_total", {"pool": "offset-reader"}
        )
        return value or 0.0


def _spread(count: int) -> tuple[BatchPlan, ...]:
    # Each batch holds an early and a late record: CreateTime out of order across batches.
    return tuple(BatchPlan(timestamps=(i * 100, i * 100 + 5_000, i * 100 + 50)) for i in range(count))


@pytest.fixture
def sidecar(tmp_path: Path, sqlite_template: Path) -> Iterator[Sidecar]:
    log_dir = tmp_path / "logs"
    plans = {
        REMOTE.partition: PartitionPlan(_spread(24), tiering="remote", local_deleted=0.5),
        LOCAL.partition: PartitionPlan(_spread(10), tiering="local"),
    }
    truths = write_partitions(log_dir, plans)
    gated: list[GatedStorage] = []

    def wrap(storage: RemoteStorage) -> RemoteStorage:
        gated.append(GatedStorage(storage))
        return gated[0]

    rt = runtime(
        Backend("sqlite-fs", sqlite_template=sqlite_template),
        tmp_path,
        log_dir,
        wrap=wrap,
        remote_log_offset_reader_threads=2,
        remote_log_offset_read_max_pending_tasks=2,
    )
    try:
        tier_partition(
            rt, LogDir(log_dir).partition(TOPIC, REMOTE.partition), truths[REMOTE.partition], plans[0]
        )
        sidecar = Sidecar(rt, gated[0], truths)
        # Warm the index cache: from here on a remote lookup issues exactly one ranged read, of the .log.
        warm = sidecar.ask(REMOTE, sidecar.remote_timestamp(), timeout_ms=COLD_MS)
        assert (warm.error_code, warm.tier) == (ErrorCode.NONE, "remote")
        # Warm the metadata path too: the first query of each kind builds and compiles its SQL
        # statement, which on a loaded machine alone can outlast TIMEOUT_MS; what the tests check
        # is that nothing waits behind the stuck remote reads, not how fast a cold start is.
        assert_local_answers_normally(sidecar, timeout_ms=COLD_MS)
        yield sidecar
    finally:
        gated[0].gate.set()
        rt.close()


class Background:
    """Runs ``ListOffsets`` calls on their own threads, as concurrent clients would."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []
        self.results: dict[int, PartitionResult] = {}

    def ask(self, sidecar: Sidecar, tp: TopicPartition, timestamp: int, timeout_ms: int | None) -> int:
        index = len(self.threads)

        def run() -> None:
            self.results[index] = sidecar.ask(tp, timestamp, timeout_ms)

        thread = threading.Thread(target=run, daemon=True)
        self.threads.append(thread)
        thread.start()
        return index

    def join(self) -> dict[int, PartitionResult]:
        for thread in self.threads:
            thread.join(WAIT)
            assert not thread.is_alive(), "a ListOffsets call never returned"
        return self.results


def _answer(result: PartitionResult) -> Expected:
    assert result.error_code is ErrorCode.NONE, result.error_message
    return Expected(result.offset, result.timestamp, result.leader_epoch)


def assert_local_answers_normally(sidecar: Sidecar, timeout_ms: int = TIMEOUT_MS) -> None:
    """Every lookup that needs no remote read answers correctly, from the calling thread."""
    questions = [(LOCAL, t) for t in (0, 2_000, 9_999_999_999_999, -1, -2, -3, -4, -5)]
    # Not EARLIEST of REMOTE: local retention cut the broker's leader epoch checkpoint to its first
    # local offset, so the earliest offset's epoch is read from its batch in the remote tier.
    questions += [(REMOTE, t) for t in (*sidecar.local_timestamps(), -1, -4, -5)]
    for tp, timestamp in questions:
        result = sidecar.ask(tp, timestamp, timeout_ms)
        assert _answer(result) == sidecar.expected(tp, timestamp), (tp, timestamp)
        assert result.remote_gets == 0
    # One request mixing both tiers: the local partition answers, whatever the remote one does.
    response: ListOffsetsResponse = sidecar.runtime.list_offsets.handle(
        ListOffsetsRequest(
            (
                TopicQuery(
                    TOPIC, (PartitionQuery(LOCAL.partition, 2_000), PartitionQuery(REMOTE.partition, -5))
                ),
            ),
            timeout_ms=timeout_ms,
        )
    )
    local, remote_latest_tiered = response.topics[0].partitions
    assert _answer(local) == sidecar.expected(LOCAL, 2_000)
    assert _answer(remote_latest_tiered) == sidecar.expected(REMOTE, -5)


def test_local_lookups_answer_while_remote_ones_time_out_and_are_cancelled(sidecar: Sidecar) -> None:
    pool = sidecar.runtime.offset_pool
    reads_before, expirations_before = sidecar.storage.log_reads, sidecar.expirations()
    sidecar.storage.gate.clear()
    clients = Background()
    for _ in range(2):  # both reader threads get stuck in a read, and stay stuck
        clients.ask(sidecar, REMOTE, sidecar.remote_timestamp(), TIMEOUT_MS)
    wait_until(lambda: sidecar.storage.waiting == 2)
    for _ in range(2):  # queued behind them until their own deadline
        clients.ask(sidecar, REMOTE, sidecar.remote_timestamp(), TIMEOUT_MS)

    assert_local_answers_normally(sidecar)

    results = clients.join()
    assert [r.error_code for r in results.values()] == [ErrorCode.REQUEST_TIMED_OUT] * 4
    assert all(r.error_message for r in results.values())
    assert sidecar.expirations() == expirations_before + 4
    # The queued tasks were dropped at the deadline; the running ones were told to stop.
    assert pool.pending == 0 and sidecar.storage.waiting == 2
    sidecar.storage.gate.set()
    wait_until(lambda: pool.running == 0)
    assert sidecar.storage.log_reads == reads_before + 2, "a cancelled queued task read the remote tier"
    # Healthy again: the same remote lookup answers.
    again = sidecar.ask(REMOTE, sidecar.remote_timestamp())
    assert _answer(again) == sidecar.expected(REMOTE, sidecar.remote_timestamp())


def test_a_full_queue_rejects_remote_lookups_at_once(sidecar: Sidecar) -> None:
    pool = sidecar.runtime.offset_pool
    remote = sidecar.remote_timestamp()
    rejections_before = sidecar.rejections()
    sidecar.storage.gate.clear()
    clients = Background()
    for _ in range(2):  # both threads stuck, then the queue of two full; they wait as long as it takes
        clients.ask(sidecar, REMOTE, remote, 60_000)
    wait_until(lambda: sidecar.storage.waiting == 2)
    for _ in range(2):
        clients.ask(sidecar, REMOTE, remote, 60_000)
    wait_until(lambda: pool.pending == 2)

    # Answered without waiting: the gate is still closed and the request's timeout is a minute.
    full = sidecar.ask(REMOTE, remote, timeout_ms=60_000)
    assert full.error_code is ErrorCode.THROTTLING_QUOTA_EXCEEDED
    assert full.error_message and "retry later" in full.error_message
    assert sidecar.rejections() == rejections_before + 1
    assert_local_answers_normally(sidecar)
    assert sidecar.storage.waiting == 2 and pool.pending == 2

    sidecar.storage.gate.set()
    for result in clients.join().values():
        assert _answer(result) == sidecar.expected(REMOTE, remote)


def test_resizing_the_pool_and_changing_the_default_timeout_take_effect(sidecar: Sidecar) -> None:
    pool, timeout = sidecar.runtime.offset_pool, sidecar.runtime.request_timeout
    remote = sidecar.remote_timestamp()
    pool.resize(1)
    wait_until(lambda: pool.live_threads == 1)
    sidecar.storage.gate.clear()
    clients = Background()
    clients.ask(sidecar, REMOTE, remote, 60_000)
    wait_until(lambda: sidecar.storage.waiting == 1)
    clients.ask(sidecar, REMOTE, remote, 60_000)
    wait_until(lambda: pool.pending == 1)

    pool.resize(2)  # the queued lookup starts on the new thread at once
    wait_until(lambda: sidecar.storage.waiting == 2 and pool.pending == 0)
    assert pool.threads == pool.live_threads == 2

    # A request without its own timeout waits remote.list.offsets.request.timeout.ms, as set now
    # (the default of 30 s would outlast WAIT).
    timeout.default_ms = 50
    late = Background()
    late.ask(sidecar, REMOTE, remote, None)
    [result] = late.join().values()
    assert result.error_code is ErrorCode.REQUEST_TIMED_OUT

    sidecar.storage.gate.set()
    for answered in clients.join().values():
        assert _answer(answered) == sidecar.expected(REMOTE, remote)
