"""The C NDJSON writer of :mod:`rlm.stream.ndjson`."""

from array import array

def lines(buffers: list[bytearray], used: array[int], spans: list[tuple[int, bytes, int]], /) -> bytes: ...
