"""Which S3 answers are retried: throttling and server faults are, unimplemented calls and refusals not."""

from __future__ import annotations

import pytest

from rlm.errors import ChecksumMismatchError, NotFoundError, StorageError, StorageUnavailableError
from rlm.storage.s3_errors import error_for_code


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("InternalError", 500),
        ("BadGateway", 502),
        ("ServiceUnavailable", 503),
        ("SlowDown", 503),
        ("GatewayTimeout", 504),
        ("", 520),  # a CDN in front of the store (Cloudflare) that lost its origin
        ("TooManyRequests", 429),
        ("RequestTimeout", 400),
    ],
)
def test_throttling_and_server_faults_are_retried(code: str, status: int) -> None:
    error = error_for_code(code, status, f"S3 PutObject 'k': {code}", "k")
    assert isinstance(error, StorageUnavailableError) and error.retriable


@pytest.mark.parametrize(
    ("code", "status"),
    [("NotImplemented", 501), ("", 501), ("MethodNotAllowed", 405), ("NotImplemented", 0), ("", 505)],
)
def test_a_call_the_store_does_not_implement_is_not_retried(code: str, status: int) -> None:
    error = error_for_code(code, status, "S3 ListMultipartUploads 'k': NotImplemented", "k")
    assert type(error) is StorageError and not error.retriable
    assert "the store does not implement this call" in str(error)


def test_a_refused_checksum_header_is_not_retried_and_names_the_setting() -> None:
    message = "S3 PutObject 'k': InvalidArgument Unsupported header 'x-amz-checksum-crc32c' received"
    error = error_for_code("InvalidArgument", 400, message, "k")
    assert type(error) is StorageError and not error.retriable
    assert "s3.checksums: md5 or off" in str(error)


@pytest.mark.parametrize(("code", "status"), [("AccessDenied", 403), ("InvalidArgument", 400), ("", 400)])
def test_other_refusals_are_not_retried(code: str, status: int) -> None:
    error = error_for_code(code, status, "S3 PutObject 'k': refused", "k")
    assert type(error) is StorageError and not error.retriable
    assert "s3.checksums" not in str(error)


def test_missing_objects_and_damaged_bodies_keep_their_own_classes() -> None:
    assert isinstance(error_for_code("NoSuchKey", 404, "m", "k"), NotFoundError)
    assert isinstance(error_for_code("BadDigest", 400, "m", "k"), ChecksumMismatchError)
