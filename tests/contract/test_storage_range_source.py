"""A remote ``.log`` read through :class:`~rlm.storage.range_source.RangeSource` at the size its
metadata row records: on the filesystem backend and on S3 over HTTP (moto)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlm.errors import CorruptDataError
from rlm.log.byte_source import iter_headers
from rlm.log.files import segment_file_name
from rlm.log.writer import PartitionAppender, ProducerRecord, TopicConfig
from rlm.storage.filesystem import FilesystemStorage
from rlm.storage.protocol import RemoteStorage
from rlm.storage.range_source import RangeSource
from tests.s3_support import MotoS3


@pytest.fixture(params=["filesystem", "moto"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RemoteStorage]:
    """An empty store of each backend."""
    store: RemoteStorage
    if request.param == "filesystem":
        store = FilesystemStorage(tmp_path / "remote")
    else:
        server: MotoS3 = request.getfixturevalue("moto_s3")
        store = server.storage(server.new_bucket(), f"t/{uuid.uuid4().hex}")
    try:
        yield store
    finally:
        store.close()


def _log_bytes(tmp_path: Path, batches: int) -> bytes:
    """A real ``.log`` of ``batches`` batches of ten records each."""
    directory = tmp_path / "local" / "t-0"
    appender = PartitionAppender(directory, config=TopicConfig(segment_bytes=1 << 30), clock=lambda: 1_000)
    for i in range(batches):
        appender.append([ProducerRecord(1_000, None, bytes([i]) * 100) for _ in range(10)])
    appender.close()
    return (directory / segment_file_name(0, ".log")).read_bytes()


def test_a_read_within_the_recorded_size_that_comes_back_short_is_corrupt(storage: RemoteStorage) -> None:
    storage.put_object("p/cut.log", b"x" * 100)  # the row says 200 bytes: half the object is gone
    source = RangeSource(storage, "p/cut.log", 200)
    assert source.read(0, 50) == b"x" * 50
    with pytest.raises(
        CorruptDataError, match=r"p/cut\.log, position 0: 100 of 200 bytes read.*shorter than the 200"
    ):
        source.read(0, 200)
    with pytest.raises(CorruptDataError, match=r"p/cut\.log"):
        source.read(150, 10)


def test_a_remote_log_shorter_than_its_row_is_not_read_as_fewer_batches(
    storage: RemoteStorage, tmp_path: Path
) -> None:
    data = _log_bytes(tmp_path, 5)
    storage.put_object("p/whole.log", data)
    headers = list(iter_headers(RangeSource(storage, "p/whole.log", len(data))))
    assert len(headers) == 5
    last = headers[-1]
    storage.put_object("p/cut.log", data[: last.position])  # the last batch lost
    with pytest.raises(CorruptDataError, match=r"p/cut\.log"):
        list(iter_headers(RangeSource(storage, "p/cut.log", len(data))))
