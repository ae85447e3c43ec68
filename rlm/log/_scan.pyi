"""The C loops of :mod:`rlm.log.scan` (see there for what they answer)."""

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
