"""How executors reach the remote tier: a picklable spec they open the storage backend from.

A live storage client (boto3 connections, a thread pool) cannot travel to an executor, and should
not: each executor process opens its own from a :class:`StorageSpec`, through the composition
root's opener (:func:`rlm.bootstrap.open_remote_storage`), and keeps it for the tasks it runs
after. Credentials are not part of the spec: executors take them from the standard AWS chain of
their own environment (on Spark: ``spark.executorEnv.*``, instance roles, ...).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from rlm.config import Settings
from rlm.storage.protocol import RemoteStorage

_opened: dict[StorageSpec, RemoteStorage] = {}
_lock = threading.Lock()


@dataclass(frozen=True)
class StorageSpec:
    """What an executor needs to open the remote tier; immutable, picklable, holds no secret."""

    remote_url: str
    """``remote.url``: ``s3://bucket/prefix`` or ``file:///path``."""
    s3_endpoint_url: str | None = None
    """``s3.endpoint.url``: endpoint of an S3-compatible store."""

    @classmethod
    def from_settings(cls, settings: Settings) -> StorageSpec:
        """The spec of the remote tier ``settings`` name."""
        return cls(settings.remote_url, settings.s3_endpoint_url)

    def open(self) -> RemoteStorage:
        """Open a new storage client; the caller closes it.

        Raises:
            ConfigError: The URL or an option is not usable.
        """
        from rlm.bootstrap import open_remote_storage

        return open_remote_storage(Settings(remote_url=self.remote_url, s3_endpoint_url=self.s3_endpoint_url))


def executor_storage(spec: StorageSpec) -> RemoteStorage:
    """The storage client of this process for ``spec``, opened on first use and kept.

    Executor processes run many tasks one after another; opening a client (an HTTP connection
    pool) per task would cost more than a small segment's reads. A client lives as long as the
    process; its exit releases the connections. Thread-safe.
    """
    with _lock:
        storage = _opened.get(spec)
        if storage is None:
            storage = _opened[spec] = spec.open()
        return storage
