"""The C loops of :mod:`rlm.log.scan` (see there for what they answer)."""

from rlm.log.model import BatchHeader

def find_record(
    data: bytes | bytearray | memoryview,
    pos: int,
    end: int,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append: bool,
    timestamp: int,
    start_offset: int,
    /,
) -> tuple[int, int] | None: ...
def skip_below(
    data: bytes | bytearray | memoryview, pos: int, limit: int, timestamp: int, start_offset: int, /
) -> int: ...
def v2_headers(
    data: bytes | bytearray | memoryview, pos: int, at: int, budget: int, header_type: type[BatchHeader], /
) -> tuple[list[BatchHeader], int]: ...
def adjoining(views: list[bytes | memoryview], /) -> memoryview | None: ...
