"""The RemoteStorage contract: every test runs on the filesystem backend and on S3 over HTTP, on two
independent servers: moto (close to AWS) and s3rver (no ListMultipartUploads nor
AbortMultipartUpload, checksums ignored, ``Range: bytes=0-0`` answered with the whole object)."""

from __future__ import annotations

import base64
import logging
import os
import random
import re
import threading
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal, cast
from urllib.parse import parse_qs, urlsplit

import pytest
from botocore.awsrequest import AWSPreparedRequest, AWSResponse

from rlm.errors import (
    ChecksumMismatchError,
    CorruptDataError,
    InvalidObjectKeyError,
    NotFoundError,
    StorageError,
)
from rlm.log.byte_source import FileSource, iter_headers, read_batch_bytes
from rlm.log.files import segment_file_name
from rlm.log.logdir import LEADER_EPOCH_CHECKPOINT
from rlm.log.writer import PartitionAppender, ProducerRecord, TopicConfig
from rlm.metastore.model import IndexType, PendingUpload
from rlm.storage.filesystem import TMP_SUFFIX, FilesystemStorage
from rlm.storage.layout import IndexBlob, partition_prefix, segment_keys
from rlm.storage.payload import crc32c_update
from rlm.storage.protocol import RemoteStorage
from rlm.storage.range_source import RangeSource, read_index
from rlm.storage.ratelimit import RateLimiter
from rlm.storage.s3 import S3Storage
from rlm.storage.s3_config import MIN_PART_BYTES
from rlm.storage.s3_multipart import s3_crc32c
from tests.s3_support import (
    TEST_S3_CONFIG,
    MotoS3,
    RecordingEvents,
    S3Server,
)
from tests.storage_faults import Fault, FaultInjector, made_up_response

#: Bigger than the S3 store's multipart threshold: three parts of 5 MiB, 5 MiB and 1 MiB + 3.
MULTIPART_SIZE = 2 * MIN_PART_BYTES + 1024 * 1024 + 3
ESCAPING_KEYS = ["../x", "a/../../x", "/abs/x", "a\\b", "", "a//b", "./a", "a/.", "a/", "x\x00y", "a/\n"]


@pytest.fixture(scope="module")
def s3_bucket(moto_s3: MotoS3) -> str:
    """One bucket for the module; each test gets its own prefix in it."""
    return moto_s3.new_bucket()


@pytest.fixture(scope="module")
def s3rver_bucket(s3rver: S3Server) -> str:
    """One bucket of s3rver for the module."""
    return s3rver.new_bucket()


@pytest.fixture
def events() -> RecordingEvents:
    """What the S3 stores report (skipped optional calls, size-only checks)."""
    return RecordingEvents()


@pytest.fixture(params=["filesystem", "moto", "s3rver"])
def storage(
    request: pytest.FixtureRequest, tmp_path: Path, events: RecordingEvents
) -> Iterator[RemoteStorage]:
    """An empty store of each backend."""
    store: RemoteStorage
    if request.param == "filesystem":
        store = FilesystemStorage(tmp_path / "remote")
    else:
        server = _server(request, request.param)
        bucket = request.getfixturevalue("s3_bucket" if request.param == "moto" else "s3rver_bucket")
        store = server.storage(bucket, f"t/{uuid.uuid4().hex}", events=events)
    try:
        yield store
    finally:
        store.close()


def _server(request: pytest.FixtureRequest, name: str) -> S3Server:
    server: S3Server = request.getfixturevalue("moto_s3" if name == "moto" else "s3rver")
    return server


def _bytes(size: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(size)


# -- put and read --------------------------------------------------------------------------


def test_put_bytes_then_read_them_back(storage: RemoteStorage) -> None:
    data = _bytes(10_000)
    result = storage.put_object("p/small.log", data)
    assert result == (result.key, 10_000, crc32c_update(data))
    assert result.key == "p/small.log"
    assert storage.object_size("p/small.log") == 10_000
    assert storage.read_range("p/small.log", 0, 10_000) == data


def test_put_a_file_stores_only_the_first_size_bytes(storage: RemoteStorage, tmp_path: Path) -> None:
    data = _bytes(5000, seed=1)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data + b"\0" * 3000)  # a preallocated segment: zeros after the data
    result = storage.put_object("p/file.log", path, size=5000)
    assert (result.size, result.crc32c) == (5000, crc32c_update(data))
    assert storage.object_size("p/file.log") == 5000
    assert storage.read_range("p/file.log", 0, 8000) == data


def test_large_file_goes_up_in_parts_and_reads_back_at_any_range(
    storage: RemoteStorage, tmp_path: Path
) -> None:
    data = _bytes(MULTIPART_SIZE, seed=2)
    path = tmp_path / "big.log"
    path.write_bytes(data)
    result = storage.put_object("p/big.log", path)
    assert (result.size, result.crc32c) == (MULTIPART_SIZE, crc32c_update(data))
    assert storage.object_size("p/big.log") == MULTIPART_SIZE
    for start, length in [
        (0, 4096),  # start
        (MIN_PART_BYTES - 100, 200),  # across the first part boundary
        (MIN_PART_BYTES * 2 + 17, 65_536),  # middle of the last part
        (MULTIPART_SIZE - 10, 10),  # end
    ]:
        assert storage.read_range("p/big.log", start, length) == data[start : start + length]


def test_empty_object(storage: RemoteStorage) -> None:
    assert storage.put_object("p/empty", b"").size == 0
    assert storage.object_size("p/empty") == 0
    assert storage.read_range("p/empty", 0, 100) == b""


def test_a_range_past_the_end_returns_what_exists(storage: RemoteStorage) -> None:
    data = _bytes(1000, seed=3)
    storage.put_object("p/obj", data)
    assert storage.read_range("p/obj", 900, 500) == data[900:]
    assert storage.read_range("p/obj", 1000, 10) == b""
    assert storage.read_range("p/obj", 5000, 10) == b""
    assert storage.read_range("p/obj", 10, 0) == b""


def test_negative_ranges_are_refused(storage: RemoteStorage) -> None:
    storage.put_object("p/obj", b"abc")
    with pytest.raises(ValueError, match="bad range"):
        storage.read_range("p/obj", -1, 2)
    with pytest.raises(ValueError, match="bad range"):
        storage.read_range("p/obj", 0, -2)


def test_a_stream_yields_the_range_in_pieces(storage: RemoteStorage) -> None:
    data = _bytes(100_000, seed=4)
    storage.put_object("p/obj", data)
    pieces = list(storage.stream_range("p/obj", 0, len(data), piece_bytes=30_000))
    assert [len(p) for p in pieces] == [30_000, 30_000, 30_000, 10_000]
    assert b"".join(pieces) == data
    assert b"".join(storage.stream_range("p/obj", 500, 1000, piece_bytes=64)) == data[500:1500]
    assert b"".join(storage.stream_range("p/obj", 99_000, 5000)) == data[99_000:]
    assert list(storage.stream_range("p/obj", 100_000, 10)) == []
    assert list(storage.stream_range("p/obj", 200_000, 10)) == []
    assert list(storage.stream_range("p/obj", 10, 0)) == []
    storage.put_object("p/empty", b"")
    assert list(storage.stream_range("p/empty", 0, 10)) == []


def test_a_stream_checks_its_arguments_at_the_call_and_reads_as_it_goes(storage: RemoteStorage) -> None:
    with pytest.raises(ValueError, match="bad range"):
        storage.stream_range("p/obj", -1, 2)
    with pytest.raises(ValueError, match="at least one byte"):
        storage.stream_range("p/obj", 0, 2, piece_bytes=0)
    with pytest.raises(InvalidObjectKeyError):
        storage.stream_range("p/../x", 0, 2)
    pieces = storage.stream_range("p/missing", 0, 10)
    with pytest.raises(NotFoundError, match="p/missing"):
        next(pieces)


def test_putting_a_key_again_replaces_the_object(storage: RemoteStorage) -> None:
    storage.put_object("p/obj", b"first version, longer")
    storage.put_object("p/obj", b"second")
    assert storage.object_size("p/obj") == 6
    assert storage.read_range("p/obj", 0, 100) == b"second"


def test_a_missing_object_is_not_found(storage: RemoteStorage) -> None:
    assert storage.object_size("p/missing") is None
    with pytest.raises(NotFoundError, match="p/missing"):
        storage.read_range("p/missing", 0, 10)
    with pytest.raises(NotFoundError):
        storage.read_range("p/missing", 0, 0)


def test_a_prefix_of_other_keys_is_not_an_object(storage: RemoteStorage) -> None:
    storage.put_object("p/dir/x", b"x")
    assert storage.object_size("p/dir") is None
    with pytest.raises(NotFoundError):
        storage.read_range("p/dir", 0, 1)
    storage.delete_objects(["p/dir"])
    assert storage.object_size("p/dir/x") == 1


def test_a_checksum_the_source_does_not_have_stores_nothing(storage: RemoteStorage) -> None:
    data = _bytes(3000, seed=4)
    with pytest.raises(ChecksumMismatchError) as raised:
        storage.put_object("p/obj", data, crc32c=crc32c_update(data) ^ 1)
    assert raised.value.retriable is False
    assert storage.object_size("p/obj") is None
    assert storage.put_object("p/obj", data, crc32c=crc32c_update(data)).size == 3000


def test_bad_sources_are_refused(storage: RemoteStorage, tmp_path: Path) -> None:
    with pytest.raises(NotFoundError, match="nope.log"):
        storage.put_object("p/obj", tmp_path / "nope.log")
    short = tmp_path / "short.log"
    short.write_bytes(b"12345")
    with pytest.raises(CorruptDataError, match="holds 5 bytes, 6 expected"):
        storage.put_object("p/obj", short, size=6)
    assert storage.object_size("p/obj") is None


def test_put_honours_the_rate_limiter(storage: RemoteStorage, tmp_path: Path) -> None:
    granted: list[int] = []

    class RecordingLimiter(RateLimiter):
        def acquire(self, amount: int) -> None:
            granted.append(amount)

    path = tmp_path / "big.log"
    path.write_bytes(_bytes(MULTIPART_SIZE, seed=5))
    storage.put_object("p/big", path, rate_limiter=RecordingLimiter(1024))
    storage.put_object("p/small", b"x" * 777, rate_limiter=RecordingLimiter(1024))
    assert sum(granted) == MULTIPART_SIZE + 777
    assert max(granted) <= max(MIN_PART_BYTES, 1024 * 1024)


# -- delete and list -----------------------------------------------------------------------


def test_delete_is_idempotent(storage: RemoteStorage) -> None:
    storage.put_object("p/a", b"a")
    storage.put_object("p/b", b"b")
    storage.delete_objects(["p/a", "p/missing"])
    assert storage.object_size("p/a") is None
    assert storage.object_size("p/b") == 1
    storage.delete_objects(["p/a"])  # again
    storage.delete_objects([])
    with pytest.raises(NotFoundError):
        storage.read_range("p/a", 0, 1)
    assert list(storage.list_keys()) == ["p/b"]


def test_list_keys_by_prefix(storage: RemoteStorage, server: S3Server | None) -> None:
    keys = ["b/2", "a/x/1", "a/x/0", "a.b", "a/y", "ab/c"]
    for key in keys:
        storage.put_object(key, key.encode())
    listed = list(storage.list_keys())
    assert sorted(listed) == sorted(keys)
    if server is None or server.lists_in_order:  # s3rver lists "a/x/..." before "a.b"
        assert listed == sorted(keys)
    assert sorted(storage.list_keys("a/")) == ["a/x/0", "a/x/1", "a/y"]
    assert sorted(storage.list_keys("a/x")) == ["a/x/0", "a/x/1"]
    assert sorted(storage.list_keys("a")) == ["a.b", "a/x/0", "a/x/1", "a/y", "ab/c"]
    assert list(storage.list_keys("zzz/")) == []


def test_many_keys_are_deleted_and_listed(storage: RemoteStorage) -> None:
    keys = [f"many/{i:04d}" for i in range(120)]
    for key in keys:
        storage.put_object(key, b"")
    assert list(storage.list_keys("many/")) == keys
    storage.delete_objects(keys[::2])
    assert list(storage.list_keys("many/")) == keys[1::2]


# -- unfinished puts -------------------------------------------------------------------------


def _leave_unfinished_put(storage: RemoteStorage, key: str, server: S3Server | None) -> PendingUpload | None:
    """Leave a put of ``key`` as a killed process does: S3 parts uploaded, or a temporary file.

    Returns the S3 upload, as ``on_upload`` would have named it.
    """
    if isinstance(storage, FilesystemStorage):
        target = storage.root / key
        target.parent.mkdir(parents=True, exist_ok=True)
        (target.parent / f".{target.name}.{uuid.uuid4().hex}{TMP_SUFFIX}").write_bytes(b"first chunk")
        return None
    assert isinstance(storage, S3Storage) and server is not None
    client, full_key = server.client(), f"{storage.prefix}/{key}"
    upload = client.create_multipart_upload(Bucket=storage.bucket, Key=full_key)
    client.upload_part(
        Bucket=storage.bucket, Key=full_key, UploadId=upload["UploadId"], PartNumber=1, Body=_bytes(1000)
    )
    return PendingUpload(key, upload["UploadId"])


def _unfinished_puts(storage: RemoteStorage, server: S3Server | None) -> list[str]:
    """The key of every unfinished put (once per put), in order, seen behind the store's back."""
    if isinstance(storage, FilesystemStorage):
        return sorted(
            (tmp.parent / tmp.name[1:].rsplit(".", 2)[0]).relative_to(storage.root).as_posix()
            for tmp in storage.root.rglob(f"*{TMP_SUFFIX}")
        )
    assert isinstance(storage, S3Storage) and server is not None
    root = f"{storage.prefix}/"
    return sorted(
        key.removeprefix(root) for key in server.unfinished_uploads(storage.bucket) if key.startswith(root)
    )


@pytest.fixture
def server(storage: RemoteStorage, request: pytest.FixtureRequest) -> S3Server | None:
    """The S3 server behind ``storage``; ``None`` for the filesystem."""
    return (
        None
        if isinstance(storage, FilesystemStorage)
        else _server(request, request.node.callspec.params["storage"])
    )


def _aborts(server: S3Server | None) -> bool:
    """Whether the store can abort an unfinished put (the filesystem and moto can, s3rver cannot)."""
    return server is None or server.aborts_uploads


def test_abort_incomplete_puts_removes_the_unfinished_puts_of_exactly_its_keys(
    storage: RemoteStorage, server: S3Server | None, events: RecordingEvents
) -> None:
    storage.put_object("p/seg.log", b"stored")
    keys = ["p/seg.log", "p/seg.log", "p/seg.index", "p/seg.log.x", "p/seg", "q/seg.log"]
    recorded = [_leave_unfinished_put(storage, key, server) for key in keys]
    assert _unfinished_puts(storage, server) == sorted(keys)

    # Aborted by the ids recorded (one of p/seg.log's two uploads), and by listing for the rest.
    storage.abort_incomplete_puts(["p/seg.log", "p/seg.index"], [u for u in recorded[:1] if u])

    if _aborts(server):
        assert _unfinished_puts(storage, server) == ["p/seg", "p/seg.log.x", "q/seg.log"]
        assert events.failed == {}
    else:  # refused, logged and counted: left to the bucket's lifecycle rule
        assert _unfinished_puts(storage, server) == sorted(keys)
        assert events.failed == {"AbortMultipartUpload": 1, "ListMultipartUploads": 2}
    assert list(storage.list_keys()) == ["p/seg.log"]  # objects are not touched
    assert storage.read_range("p/seg.log", 0, 100) == b"stored"
    storage.abort_incomplete_puts(["p/seg.log", "p/seg.index"], [u for u in recorded[:1] if u])  # again
    storage.abort_incomplete_puts(["p/nothing-pending", "never/written/x.log"])
    storage.abort_incomplete_puts([])
    storage.abort_incomplete_puts(["p/seg.log.x", "p/seg", "q/seg.log"])
    assert _unfinished_puts(storage, server) == ([] if _aborts(server) else sorted(keys))
    assert list(storage.list_keys()) == ["p/seg.log"]


def test_an_upload_named_by_its_id_is_aborted_without_listing(
    storage: RemoteStorage, server: S3Server | None, events: RecordingEvents
) -> None:
    upload = _leave_unfinished_put(storage, "p/seg.log", server)
    other = _leave_unfinished_put(storage, "p/seg.log", server)
    storage.abort_incomplete_puts([], [upload] if upload else [])
    if server is None:  # nothing to name: a filesystem put leaves a file found by its name
        assert _unfinished_puts(storage, server) == ["p/seg.log", "p/seg.log"]
    elif server.aborts_uploads:
        assert other is not None and upload is not None
        remaining = server.client().list_multipart_uploads(Bucket=server_bucket(storage))
        assert [u.get("UploadId") for u in remaining.get("Uploads", [])] == [other.upload_id]
    else:
        assert _unfinished_puts(storage, server) == ["p/seg.log", "p/seg.log"]
        assert events.failed == {"AbortMultipartUpload": 1}
    assert events.failed["ListMultipartUploads"] == 0


def server_bucket(storage: RemoteStorage) -> str:
    """The bucket of an S3 store."""
    assert isinstance(storage, S3Storage)
    return storage.bucket


def test_an_invalid_key_aborts_no_put(storage: RemoteStorage, server: S3Server | None) -> None:
    upload = _leave_unfinished_put(storage, "p/seg.log", server)
    with pytest.raises(InvalidObjectKeyError):
        storage.abort_incomplete_puts(["p/seg.log", "../x"])
    with pytest.raises(InvalidObjectKeyError):
        storage.abort_incomplete_puts(
            ["p/seg.log"], [PendingUpload("../x", upload.upload_id if upload else "u")]
        )
    assert _unfinished_puts(storage, server) == ["p/seg.log"]


class PausingLimiter(RateLimiter):
    """Lets bytes through at once, but holds the put at its ``nth`` chunk until ``resume`` is set."""

    def __init__(self, nth: int) -> None:
        super().__init__(1e15)
        self.nth = nth
        self.chunks = 0
        self.paused = threading.Event()
        self.resume = threading.Event()

    def acquire(self, amount: int) -> None:
        self.chunks += 1
        if self.chunks == self.nth:
            self.paused.set()
            if not self.resume.wait(60):
                raise AssertionError("the test never resumed the put")
        super().acquire(amount)


def test_the_leftovers_of_a_put_under_way_are_its_own_unfinished_put(
    storage: RemoteStorage, server: S3Server | None, tmp_path: Path, events: RecordingEvents
) -> None:
    data = _bytes(MULTIPART_SIZE, seed=6)
    path = tmp_path / "big.log"
    path.write_bytes(data)
    limiter = PausingLimiter(nth=2)  # the first part or chunk has gone; the put is under way
    named: list[PendingUpload] = []
    with ThreadPoolExecutor(max_workers=1) as pool:
        put = pool.submit(storage.put_object, "p/big.log", path, rate_limiter=limiter, on_upload=named.append)
        try:
            assert limiter.paused.wait(60)
            assert _unfinished_puts(storage, server) == ["p/big.log"]
            # The upload was named before its first part went; a filesystem put names none.
            assert [u.key for u in named] == ([] if server is None else ["p/big.log"])

            storage.abort_incomplete_puts(["p/big.log"], named)

            assert _unfinished_puts(storage, server) == ([] if _aborts(server) else ["p/big.log"])
        finally:
            limiter.resume.set()
        if not _aborts(server):  # the store refused the abort: the put under way completes
            assert put.result(timeout=120).size == MULTIPART_SIZE
            assert storage.read_range("p/big.log", 0, MULTIPART_SIZE) == data
            assert events.failed["AbortMultipartUpload"] == 1
            return
        with pytest.raises(StorageError, match="p/big.log"):  # its put fails: nothing to finish
            put.result(timeout=120)
    assert storage.object_size("p/big.log") is None
    assert _unfinished_puts(storage, server) == []


# -- keys that could escape -----------------------------------------------------------------


@pytest.mark.parametrize("key", ESCAPING_KEYS)
def test_keys_that_could_escape_are_refused(storage: RemoteStorage, key: str, tmp_path: Path) -> None:
    with pytest.raises(InvalidObjectKeyError):
        storage.put_object(key, b"data")
    with pytest.raises(InvalidObjectKeyError):
        storage.read_range(key, 0, 1)
    with pytest.raises(InvalidObjectKeyError):
        storage.object_size(key)
    with pytest.raises(InvalidObjectKeyError):
        storage.delete_objects(["p/fine", key])
    with pytest.raises(InvalidObjectKeyError):
        storage.abort_incomplete_puts(["p/fine", key])
    assert list(storage.list_keys()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) in ([], ["remote"])


@pytest.mark.parametrize("prefix", ["../", "a/../b", "/a", "a\\b"])
def test_listing_prefixes_that_could_escape_are_refused(storage: RemoteStorage, prefix: str) -> None:
    with pytest.raises(InvalidObjectKeyError):
        list(storage.list_keys(prefix))


def test_an_invalid_key_in_a_delete_deletes_nothing(storage: RemoteStorage) -> None:
    storage.put_object("p/keep", b"k")
    with pytest.raises(InvalidObjectKeyError):
        storage.delete_objects(["p/keep", "../x"])
    assert storage.object_size("p/keep") == 1


# -- segments: the .log read as a byte source, the index object -------------------------------


@pytest.fixture(scope="module")
def rolled_segment(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A partition directory whose first segment (offset 0) is rolled, with all its files."""
    directory = tmp_path_factory.mktemp("logs") / "orders-3"
    appender = PartitionAppender(directory, config=TopicConfig(segment_bytes=48 * 1024), clock=lambda: 1_000)
    rng = random.Random(9)
    while appender.next_offset < 1200:
        batch = [ProducerRecord(1_000, None, rng.randbytes(rng.randrange(10, 200))) for _ in range(10)]
        appender.append(batch)
    appender.close()
    assert (directory / segment_file_name(0, ".log")).stat().st_size > 20 * 1024
    return directory


def test_range_source_reads_the_batches_of_a_remote_log(storage: RemoteStorage, rolled_segment: Path) -> None:
    log = rolled_segment / segment_file_name(0, ".log")
    keys = segment_keys("orders", uuid.uuid4(), 3, 0, uuid.uuid4())
    storage.put_object(keys.log_key, log)
    with FileSource(log) as local:
        expected = list(iter_headers(local))
        expected_bytes = [read_batch_bytes(local, h) for h in expected[::7]]
    remote = RangeSource(storage, keys.log_key)
    assert remote.size == log.stat().st_size
    # A small window makes the scanner issue many ranged reads, crossing batch boundaries.
    assert list(iter_headers(remote, window_bytes=1000)) == expected
    assert [read_batch_bytes(remote, h) for h in expected[::7]] == expected_bytes
    middle = expected[len(expected) // 2]
    assert list(iter_headers(remote, middle.position)) == expected[len(expected) // 2 :]


def test_range_source_of_a_missing_object(storage: RemoteStorage) -> None:
    with pytest.raises(NotFoundError):
        RangeSource(storage, "p/missing.log")


def test_index_object_holds_each_index_at_its_range(storage: RemoteStorage, rolled_segment: Path) -> None:
    files = {
        IndexType.OFFSET: (rolled_segment / segment_file_name(0, ".index")).read_bytes(),
        IndexType.TIMESTAMP: (rolled_segment / segment_file_name(0, ".timeindex")).read_bytes(),
        IndexType.LEADER_EPOCH: (rolled_segment / LEADER_EPOCH_CHECKPOINT).read_bytes(),
        IndexType.PRODUCER_SNAPSHOT: b"",
    }
    assert files[IndexType.OFFSET] and files[IndexType.TIMESTAMP]
    keys = segment_keys("orders", None, 3, 0, uuid.uuid4())
    blob = IndexBlob.build(files)
    storage.put_object(keys.indexes_key, blob.data)
    layout = blob.layout(keys)
    for kind, content in files.items():
        assert read_index(storage, layout, kind) == content
    assert read_index(storage, layout, IndexType.TRANSACTION) is None
    storage.put_object(keys.log_key, rolled_segment / segment_file_name(0, ".log"))
    assert sorted(storage.list_keys(partition_prefix("orders", None, 3))) == sorted(keys)


def test_s3_store_keeps_objects_under_its_prefix(moto_s3: MotoS3, s3_bucket: str) -> None:
    prefix = f"cluster-{uuid.uuid4().hex[:8]}/tier"
    with moto_s3.storage(s3_bucket, prefix + "/") as store:
        store.put_object("ab/k.log", b"payload")
        listing = moto_s3.client().list_objects_v2(Bucket=s3_bucket, Prefix=prefix)
        assert [o.get("Key") for o in listing.get("Contents", [])] == [f"{prefix}/ab/k.log"]
        assert list(store.list_keys()) == ["ab/k.log"]


def _request_body(request: AWSPreparedRequest) -> bytes:
    body = request.body
    if body is not None and not isinstance(body, str | bytes | bytearray):
        position = body.tell()
        data = body.read()
        body.seek(position)
        body = data
    return body.encode() if isinstance(body, str) else bytes(body or b"")


@pytest.mark.parametrize("checksum_type", ["COMPOSITE", "FULL_OBJECT"])
def test_s3_multipart_put_is_checked_part_by_part_and_whole(
    moto_s3: MotoS3,
    s3_bucket: str,
    checksum_type: Literal["COMPOSITE", "FULL_OBJECT"],
) -> None:
    data = _bytes(MULTIPART_SIZE, seed=8)
    parts = [data[start : start + MIN_PART_BYTES] for start in range(0, MULTIPART_SIZE, MIN_PART_BYTES)]
    part_crcs = [s3_crc32c(crc32c_update(part)) for part in parts]
    composite = s3_crc32c(crc32c_update(b"".join(base64.b64decode(crc) for crc in part_crcs)))
    whole = s3_crc32c(crc32c_update(data))
    sent: dict[str, list[tuple[dict[str, str], bytes, str]]] = defaultdict(list)

    def record(request: AWSPreparedRequest, event_name: str, **_: Any) -> None:
        operation = event_name.rpartition(".")[2]
        headers = {
            name.lower(): value.decode() if isinstance(value, bytes) else value
            for name, value in request.headers.items()
        }
        sent[operation].append((headers, _request_body(request), request.url))

    session = moto_s3.session()
    session.events.register("before-send.s3", record)
    prefix = f"t/{uuid.uuid4().hex}"
    config = replace(TEST_S3_CONFIG, multipart_checksum_type=checksum_type)
    with moto_s3.storage(s3_bucket, prefix, config, session=session) as store:
        result = store.put_object("p/big.log", data)
    assert result.crc32c == crc32c_update(data)

    ((create_headers, _, _),) = sent["CreateMultipartUpload"]
    assert (create_headers["x-amz-checksum-algorithm"], create_headers["x-amz-checksum-type"]) == (
        "CRC32C",
        checksum_type,
    )
    carried = {
        int(parse_qs(urlsplit(url).query)["partNumber"][0]): headers["x-amz-checksum-crc32c"]
        for headers, _, url in sent["UploadPart"]
    }
    assert carried == dict(enumerate(part_crcs, start=1))  # S3 checks each part on receipt
    ((complete_headers, complete_body, _),) = sent["CompleteMultipartUpload"]
    listed = [crc.decode() for crc in re.findall(rb"<ChecksumCRC32C>([^<]+)</ChecksumCRC32C>", complete_body)]
    assert listed == part_crcs  # S3 checks them against the parts it holds
    if checksum_type == "FULL_OBJECT":
        assert complete_headers["x-amz-checksum-crc32c"] == whole
    else:
        assert "x-amz-checksum-crc32c" not in complete_headers
    assert len(sent["HeadObject"]) == 1  # the check after the put

    head = moto_s3.client().head_object(Bucket=s3_bucket, Key=f"{prefix}/p/big.log", ChecksumMode="ENABLED")
    assert head.get("ChecksumType") == checksum_type
    reported = head.get("ChecksumCRC32C", "")
    if checksum_type == "FULL_OBJECT":
        assert reported == whole
    else:
        assert reported.partition("-")[0] == composite


def test_s3_store_on_a_missing_bucket_fails_without_retrying(moto_s3: MotoS3) -> None:
    with moto_s3.storage("rlm-no-such-bucket") as store:
        with pytest.raises(StorageError, match="NoSuchBucket") as raised:
            store.put_object("k", b"x")
        assert raised.value.retriable is False


def test_filesystem_store_refuses_a_symlink_out_of_its_root(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    store = FilesystemStorage(tmp_path / "root")
    os.symlink(outside, tmp_path / "root" / "link")
    with pytest.raises(InvalidObjectKeyError, match="outside"):
        store.put_object("link/x", b"data")
    assert list(outside.iterdir()) == []


def test_s3_abort_of_an_upload_already_gone_succeeds(moto_s3: MotoS3, s3_bucket: str) -> None:
    # The first abort reaches S3 but its answer is lost; the retry finds the upload gone.
    faults = FaultInjector(
        1.0, faults=[Fault.LOST_RESPONSE], operations={"AbortMultipartUpload"}, max_faults=1
    )
    session = moto_s3.session()
    faults.install(session)
    try:
        with moto_s3.storage(s3_bucket, f"t/{uuid.uuid4().hex}", session=session) as store:
            _leave_unfinished_put(store, "p/seg.log", moto_s3)
            store.abort_incomplete_puts(["p/seg.log"])
            assert _unfinished_puts(store, moto_s3) == []
    finally:
        faults.close()
    assert faults.requests["AbortMultipartUpload"] == 2
    assert faults.injected[Fault.LOST_RESPONSE] == 1


def _listing_page(bucket: str, full_key: str, upload_id: str, next_markers: bool) -> bytes:
    """A truncated ListMultipartUploads page holding one upload of ``full_key``."""
    following = (
        f"<NextKeyMarker>{full_key}</NextKeyMarker><NextUploadIdMarker>{upload_id}</NextUploadIdMarker>"
        if next_markers
        else ""
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<ListMultipartUploadsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
        f"<Bucket>{bucket}</Bucket><KeyMarker></KeyMarker><UploadIdMarker></UploadIdMarker>{following}"
        f"<Prefix>{full_key}</Prefix><MaxUploads>1</MaxUploads><IsTruncated>true</IsTruncated>"
        f"<Upload><Key>{full_key}</Key><UploadId>{upload_id}</UploadId>"
        "<Initiated>2026-01-01T00:00:00.000Z</Initiated></Upload>"
        "</ListMultipartUploadsResult>"
    ).encode()


@pytest.mark.parametrize("next_markers", [True, False], ids=["next-page", "no-next-page"])
def test_s3_abort_reads_every_page_of_the_upload_listing(
    moto_s3: MotoS3,
    s3_bucket: str,
    next_markers: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # moto answers in one page; the first page here is S3's answer to a listing of one upload per
    # page, and the second request goes to moto (which ignores the markers and lists all again).
    prefix = f"t/{uuid.uuid4().hex}"
    full_key = f"{prefix}/p/seg.log"
    client = moto_s3.client()
    first, second = (
        client.create_multipart_upload(Bucket=s3_bucket, Key=full_key)["UploadId"] for _ in range(2)
    )
    queries: list[dict[str, list[str]]] = []

    def first_page(request: AWSPreparedRequest, **_: Any) -> AWSResponse | None:
        queries.append(parse_qs(urlsplit(request.url).query, keep_blank_values=True))
        if len(queries) > 1:
            return None
        return made_up_response(request.url, 200, _listing_page(s3_bucket, full_key, first, next_markers))

    session = moto_s3.session()
    # botocore's stubs type handlers as returning None; a before-send handler may return a response.
    session.events.register("before-send.s3.ListMultipartUploads", cast("Callable[..., None]", first_page))
    events = RecordingEvents()
    with (
        moto_s3.storage(s3_bucket, prefix, session=session, events=events) as store,
        caplog.at_level(logging.WARNING, "rlm.storage"),
    ):
        store.abort_incomplete_puts(["p/seg.log"])
    remaining = client.list_multipart_uploads(Bucket=s3_bucket, Prefix=full_key).get("Uploads", [])
    if next_markers:
        assert [q.get("key-marker") for q in queries] == [None, [full_key]]
        assert [q.get("upload-id-marker") for q in queries] == [None, [first]]
        assert remaining == []
        assert events.failed == {}
    else:  # a listing that cannot be followed is skipped like a refused one, and said so
        assert len(queries) == 1
        assert sorted(u.get("UploadId", "") for u in remaining) == sorted([first, second])
        assert events.failed == {"ListMultipartUploads": 1}
        assert "truncated but names no next page" in caplog.text
        assert "lifecycle rule" in caplog.text


def test_metadata_is_stored_replaced_and_deleted_with_its_object(storage: RemoteStorage) -> None:
    key = "p/described.indexes"
    storage.put_object(key, b"index bytes", metadata={"rlm-segment": '{"v":1,"end":99}'})
    assert storage.object_metadata(key) == {"rlm-segment": '{"v":1,"end":99}'}
    assert list(storage.list_keys("p/")) == [key]  # a sidecar is no object
    storage.put_object(key, b"index bytes again")  # replaced without metadata: none is left
    assert storage.object_metadata(key) == {}
    storage.put_object(key, b"index bytes", metadata={"rlm-segment": "x"})
    storage.delete_objects([key])
    assert storage.object_metadata(key) is None
    storage.put_object(key, b"index bytes")
    assert storage.object_metadata(key) == {}  # the deleted object's metadata did not come back
