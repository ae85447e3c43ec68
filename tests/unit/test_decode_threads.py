"""The C log walk decodes records with the GIL released (batches of 4 KiB and more): decoded on
several threads at once, the columns are the Python reference's, byte for byte."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor

import pytest

from rlm.log import columns
from rlm.log.columns import ColumnBuffers, append_log
from rlm.log.model import Codec, Record, TimestampType
from rlm.log.v2 import encode_v2_batch

pytestmark = pytest.mark.skipif(not columns.ACCELERATED, reason="the C decoder is not built")


def log(seed: int) -> bytes:
    """Batches of every codec, large enough to be decoded without the GIL, and small ones."""
    out, offset = [], 0
    draw = random.Random(seed)
    for i, codec in enumerate([Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD] * 2):
        count = 40 if i % 2 == 0 else 2
        records = [
            Record(
                offset + j,
                1_700_000_000_000 + j,
                None if j % 7 == 0 else b"k%d" % j,
                draw.randbytes(300 + j),
                (("h", b"v" * (j % 3)),) if j % 5 == 0 else (),
            )
            for j in range(count)
        ]
        out.append(
            encode_v2_batch(records, codec=codec, timestamp_type=TimestampType.CREATE_TIME, leader_epoch=seed)
        )
        offset += count
    return b"".join(out)


def decoded(data: bytes, in_c: bool) -> list[bytes]:
    cols = ColumnBuffers()
    append_log(cols, data, first_offset=3, last_offset=2**62, in_c=in_c)
    return [bytes(cols.view(i)) for i in range(len(columns.COLUMNS))]


def test_logs_decoded_on_threads_at_once_are_the_references() -> None:
    logs = [log(seed) for seed in range(4)]
    assert all(len(data) > 5 * 40 * 300 for data in logs)  # five batches of 12 KiB and more
    references = [decoded(data, in_c=False) for data in logs]
    with ThreadPoolExecutor(4) as pool:
        for _ in range(5):
            results = list(pool.map(lambda data: decoded(data, in_c=True), logs * 4))
            assert results == references * 4


def test_another_thread_runs_while_records_are_decoded() -> None:
    """With a switch interval far longer than the decode, the main thread runs before the worker's
    decode ends only if the decode gives the GIL up (an uncompressed batch: no codec library
    does). One batch of 4 MB: the GIL is given up for most of its decode, which leaves the main
    thread time to take it; tried a few times, as another thread may take it first."""
    import sys
    import threading

    draw = random.Random(7)
    data = encode_v2_batch([Record(j, 0, None, draw.randbytes(1000), ()) for j in range(4000)])

    def once() -> bool:
        started, done = threading.Event(), threading.Event()

        def work() -> None:
            started.set()
            decoded(data, in_c=True)
            done.set()

        worker = threading.Thread(target=work)
        worker.start()
        started.wait()
        ran_during = not done.is_set()
        worker.join()
        return ran_during

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1000.0)
    try:
        assert any(once() for _ in range(5))
    finally:
        sys.setswitchinterval(interval)
