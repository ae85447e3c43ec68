"""The bytes a put uploads — from memory or from a local file — read by range or in chunks."""

from __future__ import annotations

import os
from collections.abc import Iterator
from types import TracebackType

import crc32c as _crc32c

from rlm.errors import ChecksumMismatchError, CorruptDataError, NotFoundError
from rlm.storage.protocol import PutSource


class Payload:
    """The first ``size`` bytes of a put's source. File reads use ``pread``: thread-safe.

    Raises (on opening):
        NotFoundError: The source file does not exist.
        CorruptDataError: The source holds fewer than ``size`` bytes.
        ValueError: ``size`` is negative.
    """

    def __init__(self, source: PutSource, size: int | None = None) -> None:
        if size is not None and size < 0:
            raise ValueError(f"size {size} is negative")
        self._fd = -1
        self._data: bytes | None = None
        if isinstance(source, bytes | bytearray | memoryview):
            self.name = "<memory>"
            self._data = bytes(source)
            available = len(self._data)
        else:
            self.name = os.fspath(source)
            try:
                self._fd = os.open(self.name, os.O_RDONLY)
            except FileNotFoundError as exc:
                raise NotFoundError(f"no file {self.name} to upload") from exc
            available = os.fstat(self._fd).st_size
        self.size = available if size is None else size
        if available < self.size:
            self.close()
            raise CorruptDataError(f"holds {available} bytes, {self.size} expected", path=self.name)

    def read(self, position: int, length: int) -> bytes:
        """Exactly the bytes in ``[position, min(position + length, size))``."""
        end = min(position + length, self.size)
        if self._data is not None:
            return self._data[position:end]
        chunks: list[bytes] = []
        while position < end:
            chunk = os.pread(self._fd, end - position, position)
            if not chunk:
                raise CorruptDataError(f"shrank while being read, at {position} bytes", path=self.name)
            chunks.append(chunk)
            position += len(chunk)
        return b"".join(chunks)

    def chunks(self, chunk_bytes: int) -> Iterator[bytes]:
        """The payload in order, ``chunk_bytes`` at a time (the last chunk may be shorter)."""
        for position in range(0, self.size, chunk_bytes):
            yield self.read(position, chunk_bytes)

    def close(self) -> None:
        """Close the file; idempotent."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Payload:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def crc32c_update(data: bytes, value: int = 0) -> int:
    """CRC-32C (Castagnoli) of ``data``, continuing from ``value``."""
    return int(_crc32c.crc32c(data, value))


def check_expected_crc32c(key: str, actual: int, expected: int | None) -> None:
    """Refuse a put whose source does not have the CRC-32C its caller expected.

    Raises:
        ChecksumMismatchError: Not retriable: the same source would fail again.
    """
    if expected is not None and actual != expected:
        raise ChecksumMismatchError(
            f"{key}: source has CRC-32C {actual:08x}, expected {expected:08x}", key=key, retriable=False
        )
