"""A large range streamed to a slow reader keeps the server's memory flat.

A partition of 1 GiB and more (large batches, half of it only on the remote tier) is streamed
whole, as raw batches and as NDJSON, over real HTTP to a client that takes its body slowly, by
``rlm serve`` as users run it: a process of its own, started for the test, whose first stream this
is. Its resident memory is sampled throughout: it must not grow by more than 64 MiB, a sixteenth
of the range, as it would if the server read ahead of its bounded window, or kept the blocks its
streams freed between the blocks in use (:class:`rlm.cli.heap.GiveBackWhenGrown`: without it, a
first NDJSON stream grew the process by 70-76 MiB on a 2-core machine).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from rlm.log.logdir import LogDir
from rlm.log.model import Codec
from tests.e2e.conftest import ServeProcess, start_serve
from tests.lookup_support import (
    TOPIC,
    Backend,
    BatchPlan,
    PartitionPlan,
    Tiered,
    runtime,
    tier_partition,
    write_partition,
)

MIB = 1024 * 1024
BIG = PartitionPlan(
    batches=tuple(
        BatchPlan(timestamps=(i,) * 8, codec=Codec.NONE, value_bytes=120 * 1024) for i in range(1250)
    ),
    segment_bytes=16 * MIB,
    index_interval_bytes=1 * MIB,
    tiering="remote",
    local_deleted=0.5,
)
GIB = 1024 * MIB
MAX_GROWTH = 64 * MIB


@pytest.fixture(scope="module")
def big(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Tiered:
    """The partition, tiered (then half of it deleted locally) by a sidecar of this process."""
    root = tmp_path_factory.mktemp("stream-memory")
    log_dir = root / "logs"
    truth = write_partition(log_dir, BIG)
    backend = Backend("sqlite-fs", sqlite_template=request.getfixturevalue("sqlite_template"))
    rt = runtime(backend, root, log_dir, auth_enabled=False)
    try:
        return tier_partition(rt, LogDir(log_dir).partition(TOPIC, 0), truth, BIG)
    finally:
        rt.close()


@pytest.fixture
def served(big: Tiered, tmp_path: Path) -> Iterator[ServeProcess]:
    """A new ``rlm serve`` over the tiered partition, its copier and retention idle."""
    settings = big.runtime.settings
    served = start_serve(
        tmp_path,
        {
            "log.dirs": [str(d) for d in settings.log_dirs],
            "broker.id": settings.broker_id,
            "metadata.url": settings.metadata_url,
            "remote.url": settings.remote_url,
            "remote.log.index.cache.dir": str(tmp_path / "index-cache"),
            "remote.log.manager.task.interval.ms": 600_000,
            "auth.enabled": False,
            "topics": {"defaults": {"retention.ms": -1}},
        },
    )
    try:
        yield served
    finally:
        served.terminate()


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS in /proc/{pid}/status")


class PeakRss:
    """Samples a process's resident memory until stopped; :attr:`peak` is the highest seen."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = rss(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, rss(self.pid))

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def slow_read(served: ServeProcess, media: str, params: dict[str, str]) -> tuple[int, int]:
    """The bytes and lines of the stream of ``params``, taken slowly and dropped as they come."""
    received = lines = 0
    with (
        httpx.Client(base_url=served.http_url, timeout=60) as client,
        client.stream(
            "GET", f"/v1/topics/{TOPIC}/partitions/0/records", params=params, headers={"Accept": media}
        ) as answer,
    ):
        assert answer.status_code == 200
        for piece in answer.iter_bytes(256 * 1024):
            received += len(piece)
            lines += piece.count(b"\n")
            time.sleep(0.002)  # a slow reader: the server must wait, not read ahead
    return received, lines


@pytest.mark.slow
@pytest.mark.parametrize("media", ["application/octet-stream", "application/x-ndjson"])
def test_a_large_range_to_a_slow_reader_keeps_memory_flat(
    big: Tiered, served: ServeProcess, media: str
) -> None:
    truth = big.truth
    assert truth.local_start_offset > 0, big.notes  # the range crosses from remote to local
    data = [r.record for r in truth.records if not r.control and r.record.offset < truth.high_watermark]
    payload = sum(len(r.value or b"") for r in data)
    assert payload > GIB
    pid = served.process.pid
    baseline = rss(pid)
    sampler = PeakRss(pid)
    received, lines = slow_read(served, media, {"offset": "0", "isolation_level": "read_uncommitted"})
    peak = sampler.stop()
    if media == "application/x-ndjson":
        assert lines == len(data)  # every record of both tiers arrived
    else:
        assert received > payload
    assert peak - baseline < MAX_GROWTH, f"RSS grew by {(peak - baseline) / MIB:.0f} MiB"
