"""Local range streams read a chunk per call at the batch starts the offset index names: an index
whose entries are not at batch starts sends the stream back to reading the segment in order, and
it still holds exactly the brute-force read's records.

The partition of ``test_fetch`` (every codec, legacy wrappers, transactions committed and aborted,
leader changes, a high watermark below the log end), kept local only, its offset index entries
moved one byte past the batches they name (those at position 0 excepted, where a range from a
segment's start begins, and the last, which is checked).
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from rlm.log.logdir import LogDir
from tests.integration.test_fetch import PLAN
from tests.integration.test_stream import ARROW, NDJSON, decoded, expected, rest_client
from tests.lookup_support import TOPIC, Backend, Tiered, runtime, tier_partition, write_partition

LOCAL = dataclasses.replace(PLAN, tiering="local")


def misalign_offset_indexes(partition: Path) -> int:
    """Move every entry of the partition's offset indexes at a position above 0 one byte on, but
    each index's last (a last entry not at a batch has the index rebuilt from the log); the
    entries moved."""
    moved = 0
    for index in sorted(partition.glob("*.index")):
        raw = bytearray(index.read_bytes())
        entries = [at for at in range(0, len(raw) - 7, 8) if struct.unpack_from(">ii", raw, at)[1] > 0]
        for at in entries[:-1]:
            relative, position = struct.unpack_from(">ii", raw, at)
            if position > 0:
                struct.pack_into(">ii", raw, at, relative, position + 1)
                moved += 1
        index.write_bytes(bytes(raw))
    return moved


@pytest.fixture(scope="module")
def local(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tiered]:
    root = tmp_path_factory.mktemp("stream-local-chunks")
    log_dir = root / "logs"
    truth = write_partition(log_dir, LOCAL)
    assert misalign_offset_indexes(log_dir / f"{TOPIC}-0") > 3
    backend = Backend("sqlite-fs", sqlite_template=request.getfixturevalue("sqlite_template"))
    rt = runtime(backend, root, log_dir, wrap=None, auth_enabled=False, remote_fetch_stream_buffer_bytes=2048)
    try:
        yield tier_partition(rt, LogDir(log_dir).partition(TOPIC, 0), truth, LOCAL)
    finally:
        rt.close()


@pytest.fixture(scope="module")
def client(local: Tiered) -> Iterator[TestClient]:
    with rest_client(local.runtime) as test_client:
        yield test_client


@pytest.mark.parametrize("media", [NDJSON, ARROW])
@pytest.mark.parametrize("committed", [False, True])
def test_misaligned_index_entries_send_the_stream_back_to_reading_in_order(
    client: TestClient, local: Tiered, media: str, committed: bool
) -> None:
    truth = local.truth
    isolation = "read_committed" if committed else "read_uncommitted"
    want = expected(truth, 0, None, committed)
    assert len(want) > 50
    got = decoded(client, media, offset=0, end_offset=truth.log_end_offset, isolation_level=isolation)
    assert got == want
