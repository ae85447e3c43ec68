"""Printing of log files for ``rlm log dump``, in kafka-dump-log's words or as JSON lines."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rlm.errors import CorruptDataError
from rlm.log.batches import crc_valid, decode_batch
from rlm.log.byte_source import FileSource
from rlm.log.files import parse_base_offset, segment_file_name
from rlm.log.index import OffsetIndex, TimeIndex
from rlm.log.logdir import PartitionDir
from rlm.log.model import INT32_MAX, BatchHeader, ControlType, Record
from rlm.log.segment import segment_base_offsets
from rlm.log.snapshot import read_snapshot
from rlm.log.txnindex import TransactionIndex
from rlm.log.v2 import parse_control_record
from rlm.log.validate import BatchChecker, Problem

Emit = Callable[[str], None]


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def dump_path(path: Path, emit: Emit, *, records: bool, as_json: bool) -> list[Problem]:
    """Dump a ``.log``, an index, a snapshot, or every ``.log`` of a partition directory.

    Returns the bytes of ``.log`` files that could not be read as batches, as ``rlm log verify``
    finds them (a size field that cannot be one, bytes after the last whole batch).

    Raises:
        NotFoundError: ``path`` does not exist, or is a directory but not a partition's.
        CorruptDataError: An index or snapshot cannot be read, a batch's records cannot be decoded.
    """
    if path.is_dir():
        PartitionDir(path)  # a log directory, or any other, is refused saying what it holds
        problems: list[Problem] = []
        bases = segment_base_offsets(path)  # stray *.log entries are skipped with a warning
        for i, base in enumerate(bases):
            log = path / segment_file_name(base, ".log")
            problems += _dump_log(log, emit, records=records, as_json=as_json, active=i == len(bases) - 1)
        return problems
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist")
    suffix = path.suffix
    if suffix == ".log":
        return _dump_log(path, emit, records=records, as_json=as_json)
    if suffix in (".index", ".timeindex", ".txnindex", ".snapshot"):
        for row in _index_rows(path):
            emit(json.dumps(row) if as_json else " ".join(f"{k}: {v}" for k, v in row.items()))
        return []
    raise CorruptDataError(
        f"cannot dump {path}: expected a .log, .index, .timeindex, .txnindex or .snapshot file"
    )


def _index_rows(path: Path) -> Iterator[dict[str, Any]]:
    """The entries of an index or snapshot file; then its problems, as ``rlm log verify`` finds them."""
    base = parse_base_offset(path)
    if path.suffix == ".index":
        offsets = OffsetIndex.load(path, base)
        for o in offsets.entries():
            yield {"offset": o.offset, "position": o.position}
        offsets.sanity_check(path)
    elif path.suffix == ".timeindex":
        times = TimeIndex.load(path, base)
        for t in times.entries():
            yield {"timestamp": t.timestamp, "offset": t.offset}
        times.sanity_check(path)
    elif path.suffix == ".txnindex":
        txns = TransactionIndex.load(path, base)
        for a in txns.entries():
            yield a._asdict()
        txns.sanity_check(path)
    else:
        for e in read_snapshot(path):
            yield e._asdict()


def _dump_log(path: Path, emit: Emit, *, records: bool, as_json: bool, active: bool = False) -> list[Problem]:
    """Print the batches of a ``.log``; returns the bytes that could not be read as batches.

    ``active``: the partition's last segment, whose torn tail is a batch still being written.
    """
    base = parse_base_offset(path)
    if not as_json:
        emit(f"Dumping {path}")
        emit(f"Log starting offset: {base}")
    # The checks verify makes; a batch that fails the others is printed (crc_valid: false...).
    checker = BatchChecker(str(path), base)
    with FileSource(path) as source:
        for header, data, _ in checker.batches_of(source):
            local = header._replace(position=0)
            valid = crc_valid(data, local)
            decoded: list[Record] | None = None
            if records or (header.magic < 2 and header.base_offset < 0):
                try:
                    decoded = decode_batch(data, local, verify_crc=False)
                except CorruptDataError as exc:
                    raise exc.at(str(path), header.position) from exc
            info = batch_info(header, valid, decoded)
            if as_json and not records:
                emit(json.dumps(info))
            elif not as_json:
                emit(" ".join(f"{k}: {_text(v)}" for k, v in info.items()))
            if records and decoded is not None:
                for record in decoded:
                    row = record_info(record, header)
                    try:
                        line = json.dumps(row) if as_json else "| " + _record_text(row, record)
                    except CorruptDataError as exc:
                        raise exc.at(str(path), header.position) from exc
                    emit(line)
        size = source.size
    if checker.framing_error:
        return checker.problems[-1:]
    return checker.finish(size, active=active)


def batch_info(header: BatchHeader, valid: bool, decoded: list[Record] | None) -> dict[str, Any]:
    """The fields kafka-dump-log prints for a batch."""
    base = header.base_offset
    count = header.record_count
    if header.magic < 2 and decoded is not None and base < 0:
        base = decoded[0].offset if decoded else header.last_offset
        count = len(decoded)
    last_seq = _last_sequence(header.base_sequence, header.last_offset - base)
    return {
        "position": header.position,
        "base_offset": base,
        "last_offset": header.last_offset,
        "count": count,
        "base_timestamp": header.base_timestamp,
        "max_timestamp": header.max_timestamp,
        "timestamp_type": header.timestamp_type.label,
        "codec": header.codec.name.lower(),
        "producer_id": header.producer_id,
        "producer_epoch": header.producer_epoch,
        "base_sequence": header.base_sequence,
        "last_sequence": last_seq,
        "leader_epoch": header.leader_epoch,
        "is_transactional": header.is_transactional,
        "is_control": header.is_control,
        "delete_horizon": header.base_timestamp if header.has_delete_horizon else None,
        "size": header.size,
        "magic": header.magic,
        "crc": header.crc,
        "crc_valid": valid,
    }


def _last_sequence(base_sequence: int, delta: int) -> int:
    """The batch's last sequence: sequences wrap from INT32_MAX to 0
    (``DefaultRecordBatch.incrementSequence``); -1 (NO_SEQUENCE) stays -1."""
    if base_sequence == -1:
        return -1
    if base_sequence > INT32_MAX - delta:
        return delta - (INT32_MAX - base_sequence) - 1
    return base_sequence + delta


def record_info(record: Record, header: BatchHeader) -> dict[str, Any]:
    """The JSON object printed for one record by ``--records --json``."""
    return {
        "offset": record.offset,
        "timestamp": record.timestamp,
        "timestamp_type": header.timestamp_type.label,
        "key": _b64(record.key),
        "value": _b64(record.value),
        "headers": [[name, _b64(value)] for name, value in record.headers],
        "leader_epoch": header.leader_epoch,
        "is_control": header.is_control,
    }


def _record_text(row: dict[str, Any], record: Record) -> str:
    parts = [f"offset: {record.offset}", f"{row['timestamp_type']}: {record.timestamp}"]
    parts.append(f"keySize: {-1 if record.key is None else len(record.key)}")
    parts.append(f"valueSize: {-1 if record.value is None else len(record.value)}")
    parts.append(f"headerKeys: [{','.join(name for name, _ in record.headers)}]")
    if row["is_control"]:
        marker = parse_control_record(record)
        known = marker.type in ControlType._value2member_map_
        name = ControlType(marker.type).name if known else "UNKNOWN"
        if marker.type in (ControlType.ABORT, ControlType.COMMIT):
            parts.append(f"endTxnMarker: {name} coordinatorEpoch: {marker.coordinator_epoch}")
        else:
            parts.append(f"controlType: {name}({marker.type})")
    return " ".join(parts)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return "none" if value is None else str(value)
