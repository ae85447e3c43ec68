"""The C record decoder of :mod:`rlm.log.columns` and :func:`rlm.log.v2.decode_v2`."""

from array import array
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T", bound=tuple[object, ...])

def append_columns(
    buffers: list[bytearray],
    used: array[int],
    data: bytes | bytearray | memoryview,
    pos: int,
    end: int,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append: int | None,
    first_offset: int,
    last_offset: int,
    batch_no: int,
    /,
) -> int: ...
def decode_records(
    record_type: type[T],
    data: bytes | bytearray | memoryview,
    pos: int,
    end: int,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append: int | None,
    /,
) -> list[T]: ...
def append_batch_columns(
    buffers: list[bytearray],
    used: array[int],
    buf: bytes | bytearray | memoryview,
    pos: int,
    verify_crc: bool,
    first_offset: int,
    last_offset: int,
    batch_no: int,
    /,
) -> int: ...
def decode_batch_records(
    record_type: type[T], buf: bytes | bytearray | memoryview, pos: int, verify_crc: bool, /
) -> list[T]: ...
def crc32c(data: bytes | bytearray | memoryview, /) -> int: ...
def append_log_columns(
    buffers: list[bytearray],
    used: array[int],
    buf: bytes | bytearray | memoryview,
    pos: int,
    end: int,
    verify_crc: bool,
    first_offset: int,
    last_offset: int,
    batch_no: int,
    max_rows: int,
    calls: tuple[Callable[..., object], ...],
    positions: bytearray | None,
    expected_rows: int = 0,
    /,
) -> tuple[int, int, int]: ...
def decompress_plain(
    calls: tuple[Callable[..., object], ...], codec: int, payload: bytes | bytearray | memoryview, /
) -> bytes: ...
def decompress_native(codec: int, payload: bytes | bytearray | memoryview, /) -> bytes: ...
def set_native(enabled: bool, /) -> tuple[int, ...]: ...
def walk_v2_headers(
    buf: bytes | bytearray | memoryview, pos: int, end: int, position: int, total: int, /
) -> tuple[int, list[tuple[int, int, int, int, int, int, int, int, bool]]]: ...
