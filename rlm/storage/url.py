"""Opening remote storage from ``RLM_REMOTE_URL``: ``s3://bucket/prefix`` or ``file:///path``."""

from __future__ import annotations

import dataclasses
from typing import Any
from urllib.parse import unquote, urlsplit

from rlm.errors import ConfigError
from rlm.storage.filesystem import FilesystemStorage
from rlm.storage.protocol import RemoteStorage
from rlm.storage.s3 import S3Storage
from rlm.storage.s3_config import S3Config

_S3_CONFIG_FIELDS = frozenset(f.name for f in dataclasses.fields(S3Config))
_S3_ARGUMENTS = frozenset({"session", "executor", "sleep", "draw", "events"})


def open_storage(url: str, **options: Any) -> RemoteStorage:
    """Open the remote storage that ``url`` names.

    Args:
        url: ``s3://bucket`` or ``s3://bucket/prefix`` for S3 (or an S3-compatible store given
            ``endpoint_url``); ``file:///absolute/path`` for a local directory.
        options: For S3, fields of :class:`~rlm.storage.s3_config.S3Config` (``endpoint_url``,
            ``region``, ``part_size_bytes``, ...) and the ``session`` / ``executor`` / ``events`` arguments of
            :class:`~rlm.storage.s3.S3Storage`. The filesystem takes none.

    Raises:
        ConfigError: The scheme is not ``s3`` or ``file``, the URL is malformed, or an option is
            unknown or out of range.
    """
    parts = urlsplit(url)
    if parts.query or parts.fragment:
        raise ConfigError(
            f"remote storage URL {url!r} must not have a query or fragment: S3 options are "
            "settings (s3.endpoint.url, s3.region, s3.checksums, ...; see the README)"
        )
    if parts.scheme == "s3":
        if not parts.netloc:
            raise ConfigError(f"remote storage URL {url!r} names no bucket (expected s3://bucket/prefix)")
        unknown = set(options) - _S3_CONFIG_FIELDS - _S3_ARGUMENTS
        if unknown:
            raise ConfigError(f"unknown S3 storage options: {', '.join(sorted(unknown))}")
        config = S3Config(**{k: v for k, v in options.items() if k in _S3_CONFIG_FIELDS})
        arguments = {k: v for k, v in options.items() if k in _S3_ARGUMENTS}
        return S3Storage(parts.netloc, unquote(parts.path), config, **arguments)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise ConfigError(f"remote storage URL {url!r} names a host; use file:///absolute/path")
        if not parts.path.startswith("/"):
            raise ConfigError(f"remote storage URL {url!r} needs an absolute path (file:///path)")
        if options:
            raise ConfigError(f"file storage takes no options, got: {', '.join(sorted(options))}")
        return FilesystemStorage(unquote(parts.path))
    raise ConfigError(f"remote storage URL {url!r}: the scheme must be s3:// or file://")
