"""Producer-state snapshot (``<offset>.snapshot``), schema ``ProducerSnapshot`` version 1.

Big-endian, non-flexible encoding (``ProducerStateManager.writeSnapshot/readSnapshot``)::

    0   version                int16   1
    2   crc                    uint32  CRC-32C of bytes [6, end)
    6   count                  int32   number of producer entries
    10  entries, 46 bytes each:
          producerId int64, epoch int16, lastSequence int32, lastOffset int64,
          offsetDelta int32, timestamp int64, coordinatorEpoch int32,
          currentTxnFirstOffset int64 (-1: no open transaction)

The file is exactly ``10 + 46 * count`` bytes. The name's offset is the log offset (exclusive) up to
which the state is valid. Kafka deletes a snapshot it cannot read and rebuilds the state from the
log, so every defect is reported as :class:`~rlm.errors.CorruptCheckpointError`.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from typing import NamedTuple

import crc32c

from rlm.errors import CorruptCheckpointError
from rlm.log.files import StrPath, atomic_write

SNAPSHOT_VERSION = 1
SNAPSHOT_SUFFIX = ".snapshot"
_HEADER = struct.Struct(">hIi")
_ENTRY = struct.Struct(">qhiqiqiq")
HEADER_SIZE = _HEADER.size  # 10
ENTRY_SIZE = _ENTRY.size  # 46
#: Where the checksummed part starts: right after version and crc.
CRC_START = 6


class ProducerStateEntry(NamedTuple):
    """What a snapshot records about one producer."""

    producer_id: int
    epoch: int
    last_sequence: int
    last_offset: int
    """Last offset of the producer's last batch; negative means no batch metadata."""
    offset_delta: int
    """``lastOffset - firstOffset`` of that batch."""
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int
    """First offset of the producer's open transaction, -1 when there is none."""


def encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    """The bytes of a snapshot holding ``entries`` in the given order.

    Raises:
        ValueError: a field does not fit its type.
    """
    body = bytearray()
    count = 0
    for entry in entries:
        try:
            body += _ENTRY.pack(*entry)
        except struct.error as exc:
            raise ValueError(f"cannot encode {entry}: {exc}") from exc
        count += 1
    checked = count.to_bytes(4, "big", signed=True) + body
    return SNAPSHOT_VERSION.to_bytes(2, "big") + crc32c.crc32c(checked).to_bytes(4, "big") + checked


def decode_snapshot(data: bytes, *, path: StrPath | None = None) -> list[ProducerStateEntry]:
    """The entries of a snapshot.

    Raises:
        CorruptCheckpointError: truncated or over-long data, an unknown version, a negative count
            or a CRC mismatch; it names ``path`` when given.
    """
    location = None if path is None else os.fspath(path)

    def corrupt(reason: str, position: int | None = None) -> CorruptCheckpointError:
        return CorruptCheckpointError(f"producer snapshot: {reason}", path=location, position=position)

    if len(data) < HEADER_SIZE:
        raise corrupt(f"truncated: {len(data)} bytes, the header alone is {HEADER_SIZE}")
    version, stored_crc, count = _HEADER.unpack_from(data)
    if version != SNAPSHOT_VERSION:
        raise corrupt(f"unknown version {version}, expected {SNAPSHOT_VERSION}", 0)
    if count < 0:
        raise corrupt(f"negative entry count {count}", CRC_START)
    expected = HEADER_SIZE + ENTRY_SIZE * count
    if len(data) != expected:
        state = "truncated" if len(data) < expected else "trailing bytes"
        raise corrupt(f"{state}: {count} entries need {expected} bytes, found {len(data)}")
    computed = crc32c.crc32c(memoryview(data)[CRC_START:])
    if computed != stored_crc:
        raise corrupt(f"CRC mismatch: stored {stored_crc:#010x}, computed {computed:#010x}", 2)
    return [ProducerStateEntry._make(t) for t in _ENTRY.iter_unpack(memoryview(data)[HEADER_SIZE:])]


def read_snapshot(path: StrPath) -> list[ProducerStateEntry]:
    """Read and check the snapshot file at ``path``.

    Raises:
        FileNotFoundError: there is no such file.
        CorruptCheckpointError: see :func:`decode_snapshot`.
    """
    with open(path, "rb") as f:
        data = f.read()
    return decode_snapshot(data, path=path)


def write_snapshot(path: StrPath, entries: Iterable[ProducerStateEntry]) -> None:
    """Atomically write a snapshot of ``entries`` to ``path``.

    Raises:
        ValueError: a field does not fit its type.
    """
    atomic_write(path, encode_snapshot(entries))
