"""A large range streamed to a slow reader keeps the server's memory flat.

A partition of 1 GiB and more (large batches, half of it only on the remote tier) is streamed
whole, as raw batches and as NDJSON, over real HTTP to a client that takes its body slowly. The
process's resident memory is sampled throughout: it must not grow by more than 64 MiB, a sixteenth
of the range, as it would if the server read ahead of its bounded window.

A shorter range across the tier boundary is streamed first (:func:`warm_up`), and the growth is
measured from there: what glibc's allocator keeps of a process's first stream is not what the
range's length adds. glibc raises its mmap threshold at the first large block freed and then keeps
freed blocks of that size on its heaps: on a 2-core machine a first NDJSON stream in a fresh
process grew it by 70-76 MiB, 11-13 MiB with the threshold fixed at 128 KiB
(``MALLOC_MMAP_THRESHOLD_=131072``); after the warm-up, the whole range grew it by about 31 MiB.
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
from tests.integration.test_stream_limits import Served
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
def big(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Tiered, Served]]:
    root = tmp_path_factory.mktemp("stream-memory")
    log_dir = root / "logs"
    truth = write_partition(log_dir, BIG)
    backend = Backend("sqlite-fs", sqlite_template=request.getfixturevalue("sqlite_template"))
    rt = runtime(backend, root, log_dir, auth_enabled=False)
    tiered = tier_partition(rt, LogDir(log_dir).partition(TOPIC, 0), truth, BIG)
    served = Served(rt)
    try:
        yield tiered, served
    finally:
        served.stop()
        rt.close()


def rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


class PeakRss:
    """Samples the resident memory until stopped; :attr:`peak` is the highest seen."""

    def __init__(self) -> None:
        self.peak = rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, rss())

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def slow_read(served: Served, media: str, params: dict[str, str]) -> tuple[int, int]:
    """The bytes and lines of the stream of ``params``, taken slowly and dropped as they come."""
    received = lines = 0
    with (
        httpx.Client(base_url=served.url, timeout=60) as client,
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


def warm_up(served: Served, media: str, boundary: int) -> None:
    """About 200 MB across the tier boundary, streamed as the measured range is (module docstring)."""
    params = {"offset": str(max(0, boundary - 800)), "end_offset": str(boundary + 800)}
    received, _ = slow_read(served, media, params)
    assert received > 100 * MIB


@pytest.mark.slow
@pytest.mark.parametrize("media", ["application/octet-stream", "application/x-ndjson"])
def test_a_large_range_to_a_slow_reader_keeps_memory_flat(big: tuple[Tiered, Served], media: str) -> None:
    tiered, served = big
    truth = tiered.truth
    assert truth.local_start_offset > 0, tiered.notes  # the range crosses from remote to local
    data = [r.record for r in truth.records if not r.control and r.record.offset < truth.high_watermark]
    payload = sum(len(r.value or b"") for r in data)
    assert payload > GIB
    warm_up(served, media, truth.local_start_offset)
    baseline = rss()
    sampler = PeakRss()
    received, lines = slow_read(served, media, {"offset": "0", "isolation_level": "read_uncommitted"})
    peak = sampler.stop()
    if media == "application/x-ndjson":
        assert lines == len(data)  # every record of both tiers arrived
    else:
        assert received > payload
    assert peak - baseline < MAX_GROWTH, f"RSS grew by {(peak - baseline) / MIB:.0f} MiB"
