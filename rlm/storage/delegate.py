"""A RemoteStorage that forwards every call to another: subclass it to watch or slow one call."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

from rlm.metastore.model import PendingUpload
from rlm.storage.protocol import STREAM_PIECE_BYTES, PutResult, PutSource, RemoteStorage
from rlm.storage.ratelimit import RateLimiter


class DelegatingStorage:
    """Forwards each :class:`RemoteStorage` call to ``inner`` unchanged."""

    def __init__(self, inner: RemoteStorage) -> None:
        self.inner = inner

    def put_object(
        self,
        key: str,
        source: PutSource,
        *,
        size: int | None = None,
        crc32c: int | None = None,
        rate_limiter: RateLimiter | None = None,
        on_upload: Callable[[PendingUpload], None] | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> PutResult:
        return self.inner.put_object(
            key,
            source,
            size=size,
            crc32c=crc32c,
            rate_limiter=rate_limiter,
            on_upload=on_upload,
            metadata=metadata,
        )

    def read_range(self, key: str, start: int, length: int) -> bytes:
        return self.inner.read_range(key, start, length)

    def stream_range(
        self, key: str, start: int, length: int, *, piece_bytes: int = STREAM_PIECE_BYTES
    ) -> Iterator[bytes]:
        return self.inner.stream_range(key, start, length, piece_bytes=piece_bytes)

    def object_size(self, key: str) -> int | None:
        return self.inner.object_size(key)

    def object_metadata(self, key: str) -> dict[str, str] | None:
        return self.inner.object_metadata(key)

    def delete_objects(self, keys: Iterable[str]) -> None:
        self.inner.delete_objects(keys)

    def abort_incomplete_puts(self, keys: Iterable[str], uploads: Iterable[PendingUpload] = ()) -> None:
        self.inner.abort_incomplete_puts(keys, uploads)

    def list_keys(self, prefix: str = "") -> Iterator[str]:
        return self.inner.list_keys(prefix)

    def close(self) -> None:
        self.inner.close()
