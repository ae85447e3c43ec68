"""The boto3 client of an S3 store, and the one place that decides its integrity headers.

botocore (1.36 and later) adds checksum headers of its own: a CRC32 (``x-amz-checksum-crc32``
with ``x-amz-sdk-checksum-algorithm``) on every call S3 requires a checksum for, DeleteObjects
among rlm's, and, unless told ``when_required``, on every put. S3-compatible stores differ in
what they accept (:attr:`S3Config.checksums <rlm.storage.s3_config.S3Config.checksums>`):

* ``crc32c``: rlm sends its own CRC-32C on puts and parts; botocore its CRC32 on DeleteObjects.
* ``md5`` and ``off``: no ``x-amz-checksum-*`` or ``x-amz-sdk-checksum-algorithm`` header leaves
  the client, on any call (Backblaze B2 answers 400 to them). The headers are removed just before
  signing, whoever added them, so a botocore that adds new ones cannot put them back.
* ``Content-MD5`` on DeleteObjects (:attr:`S3Config.delete_content_md5`), in place of botocore's
  CRC32, for stores that require it (``MissingContentMD5``).
"""

from __future__ import annotations

import base64
import hashlib
import threading
from functools import partial
from typing import TYPE_CHECKING, Any

import boto3
import botocore.session
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.loaders import create_loader

from rlm.errors import ConfigError
from rlm.storage.s3_config import S3Config

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

#: Request headers the ``md5`` and ``off`` checksum settings never send.
CHECKSUM_HEADER_PREFIX = "x-amz-checksum-"
SDK_CHECKSUM_ALGORITHM_HEADER = "x-amz-sdk-checksum-algorithm"


#: What botocore's data loaders have read (service models, endpoint rules), per data path.
_loaded: dict[str | None, dict[Any, Any]] = {}
_loaded_lock = threading.Lock()


def new_session(
    *,
    aws_access_key_id: str | None = None,
    aws_secret_access_key: str | None = None,
    region_name: str | None = None,
) -> boto3.session.Session:
    """A new boto3 session that reads botocore's data files once per process. Its credentials and
    region come from the standard AWS chain unless given (as :class:`boto3.session.Session` takes
    them).

    Each session's loader parses the S3 service model and the endpoint rules again, a tenth of a
    second of CPU or more, which a process opening a client per job (a driver, a test) pays each
    time. The sessions made here share what their loaders read: the loader caches it in its
    ``_cache`` dictionary, keyed by what was asked, and every loader of a data path finds the
    same files.
    """
    core = botocore.session.Session()
    share_loaded_data(core)
    return boto3.session.Session(
        aws_access_key_id=aws_access_key_id,
        aws_secret_access_key=aws_secret_access_key,
        region_name=region_name,
        botocore_session=core,
    )


def share_loaded_data(core: botocore.session.Session) -> None:
    """Give ``core`` (a botocore session, aiobotocore's too) a data loader that shares what the
    other sessions of the process read (:func:`new_session`): the parsed S3 model and endpoint
    rules are some 11 MiB of objects each time they are read."""
    data_path = core.get_config_variable("data_path")
    loader = create_loader(data_path)
    with _loaded_lock:
        loader._cache = _loaded.setdefault(data_path, {})  # type: ignore[attr-defined]  # see new_session
    core.register_component("data_loader", loader)


def s3_client(session: boto3.session.Session, config: S3Config) -> S3Client:
    """A client for ``config``'s endpoint whose requests follow its checksum settings.

    Raises:
        ConfigError: The endpoint URL or the region is not usable.
    """
    try:
        client = _client(session, config)
    except ValueError as exc:  # botocore's "Invalid endpoint", "Provided region_name ... doesn't match"
        raise ConfigError(
            f"bad S3 endpoint URL {config.endpoint_url!r} or region {config.region!r}: {exc}"
        ) from exc
    client.meta.events.register("before-sign.s3", partial(_integrity_headers, config))
    return client


def _client(session: boto3.session.Session, config: S3Config) -> S3Client:
    return session.client(
        "s3",
        endpoint_url=config.endpoint_url,
        region_name=config.region,
        config=Config(**client_options(config)),
    )


def client_options(config: S3Config) -> dict[str, Any]:
    """The botocore ``Config`` arguments of ``config`` (aiobotocore's ``AioConfig`` takes the same)."""
    return {
        "connect_timeout": config.connect_timeout_s,
        "read_timeout": config.read_timeout_s,
        "max_pool_connections": config.max_pool_connections,
        "retries": {"mode": "standard", "total_max_attempts": 1},
        # Every body carries rlm's checksum (or the store needs none), so botocore need not also
        # SHA-256 the payload for the signature over plain HTTP (HTTPS never does).
        "s3": {"addressing_style": config.addressing_style, "payload_signing_enabled": False},
        # rlm sends its own checksums; by default botocore would add a CRC32 to every put.
        "request_checksum_calculation": "when_required",
        "response_checksum_validation": "when_required",
    }


def content_md5(body: bytes) -> str:
    """The ``Content-MD5`` header of ``body``: base64 of its MD5 digest."""
    return base64.b64encode(hashlib.md5(body, usedforsecurity=False).digest()).decode("ascii")


def _integrity_headers(config: S3Config, request: AWSRequest, operation_name: str, **_: Any) -> None:
    """Make ``request``'s integrity headers what ``config`` says, just before it is signed."""
    md5 = operation_name == "DeleteObjects" and config.delete_content_md5
    if config.checksums == "crc32c" and not md5:
        return
    for name in list(request.headers.keys()):
        lowered = name.lower()
        if lowered.startswith(CHECKSUM_HEADER_PREFIX) or lowered == SDK_CHECKSUM_ALGORITHM_HEADER:
            del request.headers[name]
    if md5:
        request.headers["Content-MD5"] = content_md5(_body_bytes(request.body))


def _body_bytes(body: Any) -> bytes:
    """The bytes of a request body: bytes, text, nothing, or a seekable file (left where it was)."""
    if body is None:
        return b""
    if isinstance(body, str):
        return body.encode()
    if isinstance(body, bytes | bytearray | memoryview):
        return bytes(body)
    position = body.tell()
    data = body.read()
    body.seek(position)
    return bytes(data)
