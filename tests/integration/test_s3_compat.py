"""S3-compatible stores that differ from AWS, played by a fault-injecting proxy in front of a real
server (:mod:`tests.s3_proxy`): calls they do not implement, ranges they do not honour, checksum
headers they refuse or ignore. Every request goes over HTTP as in production, and the headers
asserted on are the ones that went over the wire.
"""

from __future__ import annotations

import hashlib
import logging
import random
import uuid
from base64 import b64encode
from collections.abc import Iterator
from dataclasses import replace
from typing import Literal

import pytest
from prometheus_client import CollectorRegistry

from rlm.errors import ChecksumMismatchError, StorageError
from rlm.metastore.model import PendingUpload
from rlm.metrics import Metrics
from rlm.storage.events import StorageEvents
from rlm.storage.payload import crc32c_update
from rlm.storage.s3 import S3Storage
from rlm.storage.s3_config import MIN_PART_BYTES, S3Config
from tests.s3_proxy import ProxyFault, S3Proxy, is_checksum_header, wire_headers
from tests.s3_support import (
    TEST_S3_CONFIG,
    RecordingEvents,
    S3Server,
)

#: Two parts: 5 MiB and 4 KiB.
MULTIPART_SIZE = MIN_PART_BYTES + 4096
Checksums = Literal["crc32c", "md5", "off"]


@pytest.fixture
def proxy(s3_server: S3Server) -> Iterator[S3Proxy]:
    """A proxy in front of each S3 server."""
    with S3Proxy(s3_server.endpoint_url) as running:
        yield running


@pytest.fixture
def moto_proxy(moto_s3: S3Server) -> Iterator[S3Proxy]:
    """A proxy in front of moto (which implements every call, so the proxy's faults are the only ones)."""
    with S3Proxy(moto_s3.endpoint_url) as running:
        yield running


def _store(
    server: S3Server, proxy: S3Proxy, config: S3Config = TEST_S3_CONFIG, events: StorageEvents | None = None
) -> S3Storage:
    return server.storage(
        server.new_bucket(),
        f"t/{uuid.uuid4().hex[:8]}",
        config,
        endpoint_url=proxy.endpoint_url,
        events=events,
    )


def _metered_store(server: S3Server, proxy: S3Proxy) -> tuple[S3Storage, CollectorRegistry]:
    """A store whose events the metrics count, and the registry to read them from."""
    registry = CollectorRegistry()
    return _store(server, proxy, events=Metrics(registry)), registry


def _leave_upload(server: S3Server, store: S3Storage, key: str) -> PendingUpload:
    """An unfinished upload of ``key`` with one part, as a killed put leaves it."""
    client, full_key = server.client(), f"{store.prefix}/{key}"
    upload_id = client.create_multipart_upload(Bucket=store.bucket, Key=full_key)["UploadId"]
    client.upload_part(Bucket=store.bucket, Key=full_key, UploadId=upload_id, PartNumber=1, Body=b"x" * 100)
    return PendingUpload(key, upload_id)


# -- calls a store does not implement ------------------------------------------------------------


def test_a_store_without_list_multipart_uploads_still_aborts_recorded_uploads(
    moto_s3: S3Server,
    moto_proxy: S3Proxy,
    caplog: pytest.LogCaptureFixture,
) -> None:
    moto_proxy.inject(ProxyFault.NOT_IMPLEMENTED, "ListMultipartUploads")
    store, registry = _metered_store(moto_s3, moto_proxy)
    recorded = _leave_upload(moto_s3, store, "p/seg.log")
    unrecorded = _leave_upload(moto_s3, store, "p/seg.log")

    with caplog.at_level(logging.DEBUG, "rlm.storage"):
        store.abort_incomplete_puts(["p/seg.log"], [recorded])
        store.abort_incomplete_puts(["p/seg.log"])

    remaining = moto_s3.client().list_multipart_uploads(Bucket=store.bucket).get("Uploads", [])
    assert [u.get("UploadId") for u in remaining] == [unrecorded.upload_id]  # left to the lifecycle rule
    # 501 is permanent: one request per call, not retried.
    assert len(moto_proxy.exchanges_of("ListMultipartUploads")) == 2
    assert [e.status for e in moto_proxy.exchanges_of("AbortMultipartUpload")] == [204]
    failures = registry.get_sample_value(
        "rlm_storage_optional_call_failures_total", {"operation": "ListMultipartUploads"}
    )
    assert failures == 2
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # said once; then at debug level
    assert "NotImplemented" in warnings[0].getMessage() and "lifecycle rule" in warnings[0].getMessage()
    store.close()


def test_a_501_is_not_retried(moto_s3: S3Server, moto_proxy: S3Proxy) -> None:
    moto_proxy.inject(ProxyFault.NOT_IMPLEMENTED, "PutObject")
    store = _store(moto_s3, moto_proxy)
    with pytest.raises(StorageError, match="NotImplemented.*does not implement this call") as raised:
        store.put_object("k.log", b"data")
    assert raised.value.retriable is False
    assert len(moto_proxy.exchanges_of("PutObject")) == 1
    store.close()


# -- ranged GETs ---------------------------------------------------------------------------------

RANGES = [(0, 1), (0, 100), (100, 10), (990, 50), (999, 1), (1000, 10), (5000, 1)]


def test_a_ranged_get_answered_with_the_whole_object_gives_the_asked_slice(
    s3_server: S3Server,
    proxy: S3Proxy,
) -> None:
    store = _store(s3_server, proxy)
    data = random.Random(1).randbytes(1000)
    store.put_object("k.log", data)
    proxy.inject(ProxyFault.IGNORE_RANGE, "GetObject")
    for start, length in RANGES:
        assert store.read_range("k.log", start, length) == data[start : start + length], (start, length)
        streamed = b"".join(store.stream_range("k.log", start, length, piece_bytes=7))
        assert streamed == data[start : start + length], (start, length)
    gets = proxy.exchanges_of("GetObject")
    assert {e.status for e in gets} == {200}
    assert all("range" in e.headers for e in gets)  # asked for, and ignored
    store.close()


def test_ranges_the_server_answers_with_more_bytes_are_sliced(
    s3_server: S3Server,
    proxy: S3Proxy,
) -> None:
    # s3rver answers "bytes=0-0" with the whole object (206, Content-Range bytes 0-999/1000).
    store = _store(s3_server, proxy)
    data = random.Random(2).randbytes(1000)
    store.put_object("k.log", data)
    for start, length in RANGES:
        assert store.read_range("k.log", start, length) == data[start : start + length], (start, length)
        streamed = b"".join(store.stream_range("k.log", start, length, piece_bytes=7))
        assert streamed == data[start : start + length], (start, length)
    first = proxy.exchanges_of("GetObject")[0]
    assert first.headers["range"] == "bytes=0-0"
    expected = "bytes 0-999/1000" if s3_server.name == "s3rver" else "bytes 0-0/1000"
    assert first.response_headers["content-range"] == expected
    store.close()


def test_a_206_for_other_bytes_is_a_clear_error(moto_s3: S3Server, moto_proxy: S3Proxy) -> None:
    store = _store(moto_s3, moto_proxy)
    store.put_object("k.log", bytes(range(256)) * 4)
    moto_proxy.inject(ProxyFault.WRONG_CONTENT_RANGE, "GetObject")
    with pytest.raises(
        StorageError, match=r"asked for bytes=100-109.*Content-Range 'bytes 101-110/1024'"
    ) as raised:
        store.read_range("k.log", 100, 10)
    assert raised.value.retriable is False
    assert len(moto_proxy.exchanges_of("GetObject")) == 1
    with pytest.raises(StorageError, match=r"asked for bytes=100-109.*'bytes 101-110/1024'") as streamed:
        b"".join(store.stream_range("k.log", 100, 10))
    assert streamed.value.retriable is False
    store.close()


# -- checksum headers ---------------------------------------------------------------------------


def test_a_store_that_refuses_checksum_headers_fails_the_put_at_once_with_the_setting_to_change(
    moto_s3: S3Server,
    moto_proxy: S3Proxy,
) -> None:
    moto_proxy.inject(ProxyFault.REJECT_CHECKSUM_HEADERS)
    store = _store(moto_s3, moto_proxy)
    with pytest.raises(
        StorageError, match=r"InvalidArgument Unsupported header.*s3.checksums: md5 or off"
    ) as raised:
        store.put_object("k.log", b"data")
    assert raised.value.retriable is False
    assert len(moto_proxy.exchanges_of("PutObject")) == 1
    store.close()


def _every_call(server: S3Server, store: S3Storage) -> None:
    """Every S3 call rlm makes: puts (single, multipart), reads, listings, deletes, aborts."""
    small, big = b"small object", random.Random(3).randbytes(MULTIPART_SIZE)
    assert store.put_object("p/small.log", small).crc32c == crc32c_update(small)
    assert store.put_object("p/big.log", big).crc32c == crc32c_update(big)
    assert (
        store.read_range("p/big.log", MIN_PART_BYTES - 5, 10) == big[MIN_PART_BYTES - 5 : MIN_PART_BYTES + 5]
    )
    assert store.object_size("p/small.log") == len(small)
    assert sorted(store.list_keys("p/")) == ["p/big.log", "p/small.log"]
    store.abort_incomplete_puts(["p/seg.log"], [_leave_upload(server, store, "p/seg.log")])
    store.delete_objects(["p/small.log", "p/big.log"])
    assert list(store.list_keys("p/")) == []


@pytest.mark.parametrize(("checksums", "verify"), [("md5", "head"), ("off", "read-back")])
def test_with_checksums_md5_or_off_no_checksum_header_goes_on_any_call(
    moto_s3: S3Server,
    moto_proxy: S3Proxy,
    checksums: Checksums,
    verify: Literal["head", "read-back"],
) -> None:
    # As Backblaze B2 does: any x-amz-checksum-* or x-amz-sdk-checksum-algorithm header is a 400.
    moto_proxy.inject(ProxyFault.REJECT_CHECKSUM_HEADERS)
    config = replace(TEST_S3_CONFIG, checksums=checksums, verify_after_put=verify)
    events = RecordingEvents()
    store = _store(moto_s3, moto_proxy, config, events)

    _every_call(moto_s3, store)

    exchanges = moto_proxy.exchanges
    assert {e.status for e in exchanges} <= {200, 204, 206}, [(e.operation, e.status) for e in exchanges]
    operations = {e.operation for e in exchanges}
    assert operations >= {
        "PutObject", "CreateMultipartUpload", "UploadPart", "CompleteMultipartUpload", "HeadObject",
        "GetObject", "ListObjectsV2", "ListMultipartUploads", "AbortMultipartUpload", "DeleteObjects",
    }  # fmt: skip
    assert not {name for name in wire_headers(exchanges) if is_checksum_header(name)}
    for exchange in moto_proxy.exchanges_of("DeleteObjects"):  # S3 requires an integrity header here
        assert exchange.headers["content-md5"] == b64encode(hashlib.md5(exchange.body).digest()).decode()
    for exchange in moto_proxy.exchanges_of("PutObject", "UploadPart"):
        md5 = exchange.headers.get("content-md5")
        assert md5 == (
            b64encode(hashlib.md5(exchange.body).digest()).decode() if checksums == "md5" else None
        )
    assert events.size_only == 0  # checked by size by configuration: nothing silent to report
    store.close()


@pytest.mark.parametrize("content_md5", [None, True], ids=["default", "content-md5"])
def test_delete_objects_carries_content_md5_when_asked_for(
    moto_s3: S3Server,
    moto_proxy: S3Proxy,
    content_md5: bool | None,
) -> None:
    store = _store(moto_s3, moto_proxy, replace(TEST_S3_CONFIG, content_md5=content_md5))
    store.put_object("k.log", b"data")
    store.delete_objects(["k.log"])
    (put,) = moto_proxy.exchanges_of("PutObject")
    assert "x-amz-checksum-crc32c" in put.headers  # crc32c checksums on the data either way
    (delete,) = moto_proxy.exchanges_of("DeleteObjects")
    if content_md5:
        assert delete.headers["content-md5"] == b64encode(hashlib.md5(delete.body).digest()).decode()
        assert not {name for name in delete.headers if is_checksum_header(name)}
    else:  # botocore's own: what stores that require Content-MD5 refuse (MissingContentMD5)
        assert "content-md5" not in delete.headers
        assert "x-amz-checksum-crc32" in delete.headers
    assert store.object_size("k.log") is None
    store.close()


# -- stores that keep no checksum ---------------------------------------------------------------


def test_a_store_reporting_no_checksum_is_checked_by_size_said_once_and_counted(
    moto_s3: S3Server,
    moto_proxy: S3Proxy,
    caplog: pytest.LogCaptureFixture,
) -> None:
    moto_proxy.inject(ProxyFault.NO_CHECKSUM_ON_HEAD, "HeadObject")
    store, registry = _metered_store(moto_s3, moto_proxy)
    with caplog.at_level(logging.WARNING, "rlm.storage"):
        for number in range(3):
            store.put_object(f"k{number}.log", b"data %d" % number)
        store.put_object("big.log", bytes(MULTIPART_SIZE))
    assert registry.get_sample_value("rlm_storage_size_only_verifications_total") == 4
    assert len(caplog.records) == 1
    assert "reported no CRC-32C" in caplog.text and "s3.verify.after.put: read-back" in caplog.text
    heads = moto_proxy.exchanges_of("HeadObject")
    assert all(e.headers.get("x-amz-checksum-mode") == "ENABLED" for e in heads)  # asked, none came back
    store.close()


@pytest.mark.parametrize("verify", ["head", "read-back"])
def test_a_put_that_reads_back_whole_only_a_moment_later_is_checked_again_not_deleted(
    s3_server: S3Server,
    proxy: S3Proxy,
    verify: Literal["head", "read-back"],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # s3rver answers a streamed PUT before its file is written: a HEAD or GET right after may find
    # it empty. The check is made again a moment later before the put counts as a mismatch.
    data = random.Random(5).randbytes(1000)
    operation = "HeadObject" if verify == "head" else "GetObject"
    store = _store(s3_server, proxy, replace(TEST_S3_CONFIG, verify_after_put=verify))
    proxy.inject(ProxyFault.READS_EMPTY, operation, times=1)
    with caplog.at_level(logging.WARNING, logger="rlm.storage.s3_verify"):
        assert store.put_object("k.log", data).size == 1000
        proxy.inject(ProxyFault.READS_EMPTY, operation, times=1)
        assert store.put_object("k2.log", data).size == 1000
    assert store.read_range("k.log", 0, 1000) == data and store.read_range("k2.log", 0, 1000) == data
    lagged = [r.getMessage() for r in caplog.records if "before it read back whole" in r.getMessage()]
    assert len(lagged) == 1 and "k.log" in lagged[0] and "0 bytes" in lagged[0]  # said once

    proxy.inject(ProxyFault.READS_EMPTY, operation)  # a store that keeps it empty
    with pytest.raises(ChecksumMismatchError, match=r"0 bytes (stored|read back), 1000 sent") as raised:
        store.put_object("k3.log", data)
    assert raised.value.retriable is True
    proxy.clear()
    assert store.object_size("k3.log") is None  # deleted
    store.close()


@pytest.mark.parametrize("size", [1000, MULTIPART_SIZE], ids=["single", "multipart"])
def test_read_back_catches_bytes_a_store_ignoring_checksums_kept_damaged(
    s3rver: S3Server,
    size: int,
) -> None:
    # s3rver ignores x-amz-checksum-crc32c: bytes damaged on the way are stored as they arrive.
    data = random.Random(4).randbytes(size)
    operation = "PutObject" if size < MULTIPART_SIZE else "UploadPart"
    with S3Proxy(s3rver.endpoint_url) as proxy:
        proxy.inject(ProxyFault.CORRUPT_BODY, operation)
        events = RecordingEvents()
        head = _store(s3rver, proxy, events=events)
        head.put_object("k.log", data)  # the HEAD can only compare the size
        assert events.size_only == 1
        assert head.read_range("k.log", 0, size) != data

        read_back = _store(s3rver, proxy, replace(TEST_S3_CONFIG, verify_after_put="read-back"))
        with pytest.raises(
            ChecksumMismatchError, match=r"CRC-32C [0-9a-f]{8} read back, [0-9a-f]{8} sent"
        ) as raised:
            read_back.put_object("k.log", data)
        assert raised.value.retriable is True
        assert read_back.object_size("k.log") is None  # deleted
        proxy.clear()
        assert read_back.put_object("k.log", data).size == size  # a retry on a healthy path
        assert read_back.read_range("k.log", 0, size) == data
        head.close()
        read_back.close()
