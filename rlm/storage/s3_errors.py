"""Translation of botocore errors into :mod:`rlm.errors`, deciding what is worth retrying.

Messages name the operation, the key and S3's error code and message; never a credential or a
signature (S3 echoes the access key id and the string to sign in some error bodies: those fields
are not used).
"""

from __future__ import annotations

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionError,
    HTTPClientError,
    IncompleteReadError,
    NoCredentialsError,
    PartialCredentialsError,
)

from rlm.errors import (
    ChecksumMismatchError,
    ConfigError,
    NotFoundError,
    RlmError,
    StorageError,
    StorageUnavailableError,
)

#: Codes that mean "no such object" (HEAD answers a bare 404 without a body).
NOT_FOUND_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
#: Codes that mean the same request may succeed later: throttling, server faults, timeouts.
RETRIABLE_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "BandwidthLimitExceeded",
        "RequestTimeout",
        "RequestTimeoutException",
        "InternalError",
        "ServiceUnavailable",
        "PriorRequestNotComplete",
        "ExpiredToken",
    }
)
#: Codes that mean the bytes S3 received are not the bytes sent: damaged in transit, send again.
DIGEST_CODES = frozenset({"BadDigest", "XAmzContentSHA256Mismatch"})
#: Answers of a store that does not implement a call: asking again cannot help. They are 5xx
#: and 4xx statuses, so they are told apart from server faults (500, 502, 503, 504: retried).
UNSUPPORTED_CODES = frozenset({"NotImplemented", "MethodNotAllowed"})
UNSUPPORTED_STATUSES = frozenset({501, 405, 505})


def s3_error_code(exc: BaseException) -> str | None:
    """S3's error code behind an error, looking through ``raise ... from`` chains."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ClientError):
            return str(cause.response.get("Error", {}).get("Code", "")) or None
        cause = cause.__cause__
    return None


def translate(exc: BotoCoreError | ClientError, *, operation: str, key: str) -> RlmError:
    """The rlm error that stands for a botocore error raised by ``operation`` on ``key``."""
    if isinstance(exc, ClientError):
        return _client_error(exc, operation, key)
    where = f"S3 {operation} {key!r}"
    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        return ConfigError(
            f"{where}: no usable AWS credentials (looked in the standard chain: environment, "
            "shared config and credentials files, web identity, container and instance roles)"
        )
    if isinstance(exc, ConnectionError | HTTPClientError | IncompleteReadError):
        return StorageUnavailableError(f"{where}: {type(exc).__name__}: {exc}", key=key)
    return StorageError(f"{where}: {type(exc).__name__}: {exc}", key=key)


def _client_error(exc: ClientError, operation: str, key: str) -> RlmError:
    error = exc.response.get("Error", {})
    code = str(error.get("Code", ""))
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
    detail = str(error.get("Message", "")).strip()
    message = f"S3 {operation} {key!r}: {code or status}" + (f" {detail}" if detail else "")
    return error_for_code(code, status, message, key)


def error_for_code(code: str, status: int, message: str, key: str) -> RlmError:
    """The rlm error for S3 error ``code`` (HTTP ``status``, 0 when unknown) on ``key``.

    Throttling (429, ``SlowDown``...) and server faults (5xx) are retriable; a call the store does
    not implement (501, 405, ``NotImplemented``) and any other 4xx (a header the store refuses
    among them) are not: the same request would get the same answer.
    """
    if code in NOT_FOUND_CODES:
        return NotFoundError(message)
    if code in DIGEST_CODES:
        return ChecksumMismatchError(message, key=key)
    if code in UNSUPPORTED_CODES or status in UNSUPPORTED_STATUSES:
        return StorageError(f"{message} (the store does not implement this call)", key=key, retriable=False)
    if code in RETRIABLE_CODES or status >= 500 or status == 429:
        return StorageUnavailableError(message, key=key)
    if status == 400 and "checksum" in message.lower():
        message += (
            " (a store that rejects S3's checksum headers needs s3.checksums: md5 or off, "
            "one without FULL_OBJECT checksums s3.multipart.checksum.type: COMPOSITE)"
        )
    return StorageError(message, key=key, retriable=False)
