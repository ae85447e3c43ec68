"""S3 under faults injected at the HTTP level: throttling, 5xx, timeouts, lost responses, corruption.

The server is moto over real HTTP; faults are answered by :class:`tests.storage_faults.FaultInjector`
in botocore's ``before-send`` hook, so the retry and cleanup paths run on parsed S3 responses.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator
from typing import Any, Literal

import pytest
from botocore.exceptions import ResponseStreamingError

from rlm.errors import ChecksumMismatchError, StorageError, StorageUnavailableError
from rlm.storage.payload import crc32c_update
from rlm.storage.retry import RetryPolicy
from rlm.storage.s3 import S3Storage
from rlm.storage.s3_config import MIN_PART_BYTES
from tests.s3_support import TEST_S3_CONFIG, MotoS3
from tests.storage_faults import NETWORK_ERRORS, SERVER_ERRORS, Fault, FaultInjector

#: Two parts: 5 MiB and 4 KiB.
MULTIPART_SIZE = MIN_PART_BYTES + 4096
#: Few attempts, so that "always failing" gives up quickly.
IMPATIENT = dataclasses.replace(
    TEST_S3_CONFIG, retry=RetryPolicy(max_attempts=3, base_delay_s=0.001, max_delay_s=0.002)
)


@pytest.fixture
def bucket(moto_s3: MotoS3) -> str:
    return moto_s3.new_bucket()


@pytest.fixture
def faults() -> Iterator[FaultInjector]:
    injector = FaultInjector(rate=0.0, seed=20261121)
    try:
        yield injector
    finally:
        injector.close()


def _store(
    moto_s3: MotoS3,
    bucket: str,
    faults: FaultInjector,
    impatient: bool = False,
    checksum_type: Literal["COMPOSITE", "FULL_OBJECT"] = "COMPOSITE",
) -> S3Storage:
    session = moto_s3.session()
    faults.install(session)
    config = dataclasses.replace(
        IMPATIENT if impatient else TEST_S3_CONFIG, multipart_checksum_type=checksum_type
    )
    return moto_s3.storage(bucket, "tier", config, session=session)


def _objects(count: int, multipart_every: int) -> dict[str, bytes]:
    rng = random.Random(count)
    return {
        f"seg/{i:03d}.log": rng.randbytes(
            MULTIPART_SIZE if i % multipart_every == 0 else rng.randrange(0, 50_000)
        )
        for i in range(count)
    }


def _round_trip(store: S3Storage, objects: dict[str, bytes]) -> None:
    """Put, read back (whole and by ranges), list and delete every object."""
    for key, data in objects.items():
        result = store.put_object(key, data)
        assert (result.size, result.crc32c) == (len(data), crc32c_update(data))
    for key, data in objects.items():
        assert store.object_size(key) == len(data)
        assert store.read_range(key, 0, len(data) + 10) == data
        middle = len(data) // 2
        assert store.read_range(key, middle, 1000) == data[middle : middle + 1000]
    assert list(store.list_keys("seg/")) == sorted(objects)
    store.delete_objects(objects)
    assert list(store.list_keys("seg/")) == []


def test_a_fifth_of_requests_failing_with_5xx_and_slowdown_still_succeeds(
    moto_s3: MotoS3,
    bucket: str,
    faults: FaultInjector,
) -> None:
    store = _store(moto_s3, bucket, faults)
    faults.rate = 0.2
    _round_trip(store, _objects(32, multipart_every=6))
    faults.rate = 0.0
    assert faults.total_injected >= 20
    assert set(faults.injected) == set(SERVER_ERRORS)
    hit = faults.injected_by_operation
    assert hit["PutObject"] + hit["UploadPart"] + hit["CompleteMultipartUpload"] > 0
    assert hit["GetObject"] > 0 and hit["HeadObject"] > 0
    assert moto_s3.unfinished_uploads(bucket) == []
    store.close()


def test_timeouts_and_lost_responses_still_succeed_without_leftovers(
    moto_s3: MotoS3,
    bucket: str,
    faults: FaultInjector,
) -> None:
    store = _store(moto_s3, bucket, faults)
    faults.faults = NETWORK_ERRORS + SERVER_ERRORS
    faults.rate = 0.25
    _round_trip(store, _objects(30, multipart_every=4))
    faults.rate = 0.0
    assert faults.injected[Fault.LOST_RESPONSE] > 0
    assert faults.injected[Fault.READ_TIMEOUT] > 0
    assert moto_s3.unfinished_uploads(bucket) == []
    store.close()


@pytest.mark.parametrize("checksum_type", ["COMPOSITE", "FULL_OBJECT"])
@pytest.mark.parametrize(
    "script",
    [(Fault.LOST_RESPONSE,), (Fault.LOST_RESPONSE, Fault.NO_SUCH_UPLOAD)],
    ids=["retry-answered-ok", "retry-answered-no-such-upload"],
)
def test_a_lost_complete_response_is_recognised_as_success(
    moto_s3: MotoS3,
    bucket: str,
    faults: FaultInjector,
    script: tuple[Fault, ...],
    checksum_type: Literal["COMPOSITE", "FULL_OBJECT"],
) -> None:
    store = _store(moto_s3, bucket, faults, checksum_type=checksum_type)
    data = random.Random(1).randbytes(MULTIPART_SIZE)
    faults.faults, faults.operations, faults.rate = script, {"CompleteMultipartUpload"}, 1.0
    faults.in_order, faults.max_faults = True, len(script)
    # The first CompleteMultipartUpload reaches S3 and "fails". S3 answers a repeated complete
    # with 200 or with NoSuchUpload; after the latter the store checks the object it finds.
    store.put_object("k.log", data)
    faults.rate = 0.0
    assert faults.total_injected == len(script)
    assert faults.requests["CompleteMultipartUpload"] == 2
    assert store.read_range("k.log", 0, MULTIPART_SIZE) == data
    assert moto_s3.unfinished_uploads(bucket) == []
    store.close()


def test_no_such_upload_after_a_failed_complete_is_not_taken_for_success(
    moto_s3: MotoS3,
    bucket: str,
    faults: FaultInjector,
) -> None:
    store = _store(moto_s3, bucket, faults)
    faults.faults, faults.operations, faults.rate = (
        (Fault.INTERNAL_ERROR, Fault.NO_SUCH_UPLOAD),
        {"CompleteMultipartUpload"},
        1.0,
    )
    faults.in_order, faults.max_faults = True, 2
    with pytest.raises(StorageError, match="NoSuchUpload") as raised:
        store.put_object("k.log", bytes(MULTIPART_SIZE))
    assert raised.value.retriable is False
    faults.rate = 0.0
    assert store.object_size("k.log") is None
    assert moto_s3.unfinished_uploads(bucket) == []
    store.close()


def test_uploads_created_behind_lost_responses_are_aborted(
    moto_s3: MotoS3,
    bucket: str,
    faults: FaultInjector,
) -> None:
    store = _store(moto_s3, bucket, faults, impatient=True)
    faults.faults, faults.operations, faults.rate = (Fault.LOST_RESPONSE,), {"CreateMultipartUpload"}, 1.0
    with pytest.raises(StorageUnavailableError) as raised:
        store.put_object("k.log", bytes(MULTIPART_SIZE))
    assert raised.value.retriable is True
    faults.rate = 0.0
    assert faults.requests["CreateMultipartUpload"] == 3  # three uploads were created on the server
    assert moto_s3.unfinished_uploads(bucket) == []
    assert store.object_size("k.log") is None
    store.close()


@pytest.mark.parametrize("size", [1000, MULTIPART_SIZE], ids=["single", "multipart"])
def test_when_every_request_fails_the_put_fails_retriably_and_leaves_nothing(
    moto_s3: MotoS3,
    bucket: str,
    faults: FaultInjector,
    size: int,
) -> None:
    store = _store(moto_s3, bucket, faults, impatient=True)
    faults.rate = 1.0
    with pytest.raises(StorageUnavailableError) as raised:
        store.put_object("k.log", bytes(size))
    assert raised.value.retriable is True
    assert "gave up after 3 attempts" in raised.value.__notes__
    faults.rate = 0.0
    assert store.object_size("k.log") is None
    assert moto_s3.unfinished_uploads(bucket) == []
    store.close()


@pytest.mark.parametrize("operation", ["UploadPart", "CompleteMultipartUpload"])
def test_a_failing_multipart_step_aborts_the_upload(
    moto_s3: MotoS3,
    bucket: str,
    faults: FaultInjector,
    operation: str,
) -> None:
    store = _store(moto_s3, bucket, faults, impatient=True)
    faults.operations, faults.rate = {operation}, 1.0
    with pytest.raises(StorageUnavailableError, match=operation):
        store.put_object("k.log", bytes(MULTIPART_SIZE + MIN_PART_BYTES))
    faults.rate = 0.0
    assert faults.requests["CreateMultipartUpload"] == 1
    assert faults.requests["AbortMultipartUpload"] == 1
    assert store.object_size("k.log") is None
    assert moto_s3.unfinished_uploads(bucket) == []
    store.close()


@pytest.mark.parametrize("checksum_type", ["COMPOSITE", "FULL_OBJECT"])
def test_parts_damaged_in_transit_are_caught_and_nothing_is_kept(
    moto_s3: MotoS3,
    bucket: str,
    faults: FaultInjector,
    checksum_type: Literal["COMPOSITE", "FULL_OBJECT"],
) -> None:
    # S3 refuses a damaged part (BadDigest); moto keeps it, and the HEAD after the put finds the
    # object's CRC-32C is not what was sent.
    store = _store(moto_s3, bucket, faults, checksum_type=checksum_type)
    faults.faults, faults.operations, faults.rate = (Fault.CORRUPT_BODY,), {"UploadPart"}, 1.0
    with pytest.raises(ChecksumMismatchError, match="CRC-32C") as raised:
        store.put_object("k.log", random.Random(2).randbytes(MULTIPART_SIZE))
    assert raised.value.retriable is True
    faults.rate = 0.0
    assert store.object_size("k.log") is None
    assert moto_s3.unfinished_uploads(bucket) == []
    store.close()


@pytest.mark.parametrize(("parts", "kept"), [(2, True), (3, False)], ids=["its-parts", "other-parts"])
def test_a_composite_crc32c_reported_with_a_part_count_is_checked_with_it(
    moto_s3: MotoS3,
    bucket: str,
    parts: int,
    kept: bool,
) -> None:
    # S3 reports a composite CRC-32C as "<crc>-<parts>" where moto's HEAD gives "<crc>".
    def s3_form(parsed: dict[str, Any], **_: Any) -> None:
        reported = parsed.get("ChecksumCRC32C")
        if parsed.get("ChecksumType") == "COMPOSITE" and reported and "-" not in reported:
            parsed["ChecksumCRC32C"] = f"{reported}-{parts}"

    session = moto_s3.session()
    session.events.register("after-call.s3.HeadObject", s3_form)
    store = moto_s3.storage(bucket, "tier", session=session)
    data = random.Random(3).randbytes(MULTIPART_SIZE)  # two parts
    if kept:
        assert store.put_object("k.log", data).crc32c == crc32c_update(data)
        assert store.read_range("k.log", 0, MULTIPART_SIZE) == data
    else:
        with pytest.raises(ChecksumMismatchError, match="CRC-32C .*-3 stored, .*-2 sent"):
            store.put_object("k.log", data)
        assert store.object_size("k.log") is None
    assert moto_s3.unfinished_uploads(bucket) == []
    store.close()


def test_reads_give_up_retriably_when_every_request_fails(
    moto_s3: MotoS3,
    bucket: str,
    faults: FaultInjector,
) -> None:
    store = _store(moto_s3, bucket, faults, impatient=True)
    store.put_object("k.log", b"payload")
    faults.operations, faults.rate = {"GetObject", "HeadObject", "ListObjectsV2", "DeleteObjects"}, 1.0
    with pytest.raises(StorageUnavailableError, match="k.log") as raised:
        store.read_range("k.log", 0, 7)
    assert raised.value.retriable is True
    with pytest.raises(StorageUnavailableError):
        store.object_size("k.log")
    with pytest.raises(StorageUnavailableError):
        list(store.list_keys())
    with pytest.raises(StorageUnavailableError):
        store.delete_objects(["k.log"])
    assert faults.requests["GetObject"] == 3
    store.close()


def test_a_denied_request_is_not_retried(
    moto_s3: MotoS3,
    bucket: str,
    faults: FaultInjector,
) -> None:
    store = _store(moto_s3, bucket, faults)
    faults.faults, faults.rate = (Fault.ACCESS_DENIED,), 1.0
    with pytest.raises(StorageError, match="AccessDenied") as raised:
        store.put_object("k.log", b"x")
    assert raised.value.retriable is False
    assert not isinstance(raised.value, StorageUnavailableError)
    assert faults.requests["PutObject"] == 1
    store.close()


class BreakingBody:
    """A GET's body whose connection drops after ``after`` bytes."""

    def __init__(self, inner: Any, after: int) -> None:
        self.inner = inner
        self.after = after

    def read(self, amt: int | None = None) -> bytes:
        if self.after <= 0:
            raise ResponseStreamingError(error=ConnectionResetError("connection reset by peer"))
        data: bytes = self.inner.read(self.after if amt is None else min(amt, self.after))
        self.after -= len(data)
        return data

    def close(self) -> None:
        self.inner.close()

    def __enter__(self) -> BreakingBody:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _breaking_store(moto_s3: MotoS3, bucket: str, breaks: list[int], ranges: list[str]) -> S3Storage:
    """A store whose next GETs break after ``breaks`` bytes each; the ranges asked go in ``ranges``."""
    session = moto_s3.session()

    def record(params: dict[str, Any], **kwargs: Any) -> None:
        ranges.append(params["Range"])

    def wrap(parsed: dict[str, Any], **kwargs: Any) -> None:
        if breaks:
            parsed["Body"] = BreakingBody(parsed["Body"], breaks.pop(0))

    session.events.register("before-parameter-build.s3.GetObject", record)
    session.events.register("after-call.s3.GetObject", wrap)
    return moto_s3.storage(bucket, "tier", IMPATIENT, session=session)


def test_a_stream_broken_part_way_resumes_where_it_stopped(
    moto_s3: MotoS3,
    bucket: str,
) -> None:
    ranges: list[str] = []
    store = _breaking_store(moto_s3, bucket, [30_000, 50_000], ranges)
    data = random.Random(5).randbytes(200_000)
    store.put_object("seg/a.log", data)
    assert b"".join(store.stream_range("seg/a.log", 0, len(data), piece_bytes=7000)) == data
    assert ranges == ["bytes=0-199999", "bytes=30000-199999", "bytes=80000-199999"]
    store.close()


def test_a_stream_that_keeps_breaking_gives_up(moto_s3: MotoS3, bucket: str) -> None:
    ranges: list[str] = []
    store = _breaking_store(moto_s3, bucket, [100, 0, 0, 0], ranges)
    store.put_object("seg/a.log", b"x" * 1000)
    pieces = store.stream_range("seg/a.log", 0, 1000, piece_bytes=64)
    with pytest.raises(StorageUnavailableError, match="response stream"):
        b"".join(pieces)
    assert ranges == ["bytes=0-999", "bytes=100-999", "bytes=100-999"]  # IMPATIENT: 3 attempts in a row
    store.close()
