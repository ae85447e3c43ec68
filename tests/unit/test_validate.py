"""The batch checks ``rlm log verify``, recovery and the copier share (``rlm.log.validate``).

Each damage is made to a real produced segment and must be found by all three, naming the file and
the position: verify reports it, recovery stops before it, and ``prepare_segment`` refuses the
segment.
"""

from __future__ import annotations

import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from rlm.cli import main
from rlm.errors import CorruptRecordError
from rlm.log.index import OffsetIndex
from rlm.log.legacy import encode_legacy_batch
from rlm.log.logdir import LogDir, PartitionDir
from rlm.log.model import Codec, Record
from rlm.log.produce import ProduceSpec, produce
from rlm.log.segment import Segment, rebuild_segment_indexes
from rlm.log.v2 import encode_v2_batch
from rlm.log.validate import BatchChecker
from rlm.log.verify import verify_partition, verify_segment
from rlm.tiering.prepare import prepare_segment

SPEC = ProduceSpec(topics=1, partitions=1, records=900, segment_bytes=12 * 1024, legacy_batches=5, seed=3)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("validate") / "logs"
    produce(root, SPEC)
    return root


@pytest.fixture
def partition(pristine: Path, tmp_path: Path) -> PartitionDir:
    shutil.copytree(pristine, tmp_path / "logs")
    return LogDir(tmp_path / "logs").partitions()[0]


def _rewrite(segment: Segment, change: Callable[[bytearray], None]) -> None:
    data = bytearray(segment.log_path.read_bytes())
    change(data)
    segment.log_path.write_bytes(bytes(data))


def _v2_batch(segment: Segment, index: int) -> tuple[int, int, int]:
    """Position, base offset and last offset of the ``index``-th v2 batch."""
    v2 = [h for h in segment.headers() if h.magic == 2]
    return v2[index].position, v2[index].base_offset, v2[index].last_offset


def _backwards(segment: Segment) -> tuple[int, str]:
    position, base, _ = _v2_batch(segment, 2)
    _rewrite(segment, lambda d: d.__setitem__(slice(position, position + 8), struct.pack(">q", base - 3)))
    return position, "offsets go backwards"


def _below_base(segment: Segment) -> tuple[int, str]:
    position, _, _ = _v2_batch(segment, 0)
    new = segment.base_offset - 50 if segment.base_offset >= 50 else segment.base_offset - 1
    _rewrite(segment, lambda d: d.__setitem__(slice(position, position + 8), struct.pack(">q", new)))
    return position, "below the segment's base offset"


def _beyond_int32(segment: Segment) -> tuple[int, str]:
    v2 = [h for h in segment.headers() if h.magic == 2]
    last = v2[-1]
    new = segment.base_offset + 2**31  # the next segment's base is far below: only the range check says why
    _rewrite(
        segment, lambda d: d.__setitem__(slice(last.position, last.position + 8), struct.pack(">q", new))
    )
    return last.position, "more than 2^31-1 above"


def _crc(segment: Segment) -> tuple[int, str]:
    position, _, _ = _v2_batch(segment, 1)
    _rewrite(segment, lambda d: d.__setitem__(position + 70, d[position + 70] ^ 0x10))
    return position, "CRC mismatch"


def _trailing(segment: Segment) -> tuple[int, str]:
    size = segment.size()
    with segment.log_path.open("ab") as out:
        out.write(b"\x00" * 10)  # too short to be read as a batch's size field and magic
    return size, "10 trailing bytes"


def _huge_length(segment: Segment) -> tuple[int, str]:
    position, _, _ = _v2_batch(segment, 1)
    _rewrite(
        segment, lambda d: d.__setitem__(slice(position + 8, position + 12), struct.pack(">i", 2**31 - 1))
    )
    return position, "trailing bytes"


DAMAGES = {
    "offsets backwards": _backwards,
    "first offset below the base": _below_base,
    "offset beyond int32 of the base": _beyond_int32,
    "crc": _crc,
    "trailing bytes": _trailing,
    "huge length": _huge_length,
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_verify_recovery_and_the_copier_find_the_same_damage(partition: PartitionDir, damage: str) -> None:
    segments = partition.segments()
    segment = segments[2]
    position, words = DAMAGES[damage](segment)
    log = str(segment.log_path)

    problems = [p for p in verify_partition(partition) if p.path == log]
    assert any(words in p.message and p.position == position for p in problems), problems

    rebuilt = rebuild_segment_indexes(segment)
    assert rebuilt.error is not None or rebuilt.valid_bytes < segment.size()
    assert rebuilt.valid_bytes <= position

    with pytest.raises(CorruptRecordError) as refused:
        prepare_segment(
            partition, segment, broker_id=1, now_ms=0, epochs=[], next_base_offset=segments[3].base_offset
        )
    assert log in str(refused.value) and f"position {position}" in str(refused.value)
    assert words in str(refused.value)


def test_a_last_offset_reaching_into_the_next_segment_is_refused(partition: PartitionDir) -> None:
    first, second = partition.segments()[:2]
    renamed = second.base_offset - 2  # the next segment now claims two offsets of this one
    for suffix in (".log", ".index", ".timeindex"):
        second.path(suffix).rename(Segment(partition.path, renamed).path(suffix))
    (first_problem,) = [p for p in verify_partition(partition) if p.path == str(first.log_path)]
    last = list(first.headers())[-1]
    assert f"not below the next segment's base offset {renamed}" in first_problem.message
    assert first_problem.position == last.position
    with pytest.raises(CorruptRecordError, match="not below the next segment's base offset"):
        prepare_segment(partition, first, broker_id=1, now_ms=0, epochs=[], next_base_offset=renamed)


def test_the_copier_refuses_missing_offsets_at_a_segment_tail(partition: PartitionDir) -> None:
    segment = partition.segments()[1]
    headers = list(segment.headers())
    # Cut at a batch boundary: every batch left is whole, but the last ones' offsets are gone.
    cut = headers[-2].position
    with segment.log_path.open("r+b") as out:
        out.truncate(cut)
    following = partition.segments()[2].base_offset
    with pytest.raises(CorruptRecordError) as refused:
        prepare_segment(partition, segment, broker_id=1, now_ms=0, epochs=[], next_base_offset=following)
    assert f"offsets {headers[-2].base_offset}..{following - 1} are missing" in str(refused.value)


def test_an_empty_rolled_segment_is_refused(partition: PartitionDir) -> None:
    segment, following = partition.segments()[1:3]
    segment.log_path.write_bytes(b"")
    with pytest.raises(CorruptRecordError, match="holds no batch"):
        prepare_segment(partition, segment, broker_id=1, now_ms=0, epochs=[])
    with pytest.raises(
        CorruptRecordError, match=f"offsets {segment.base_offset}..{following.base_offset - 1} are missing"
    ):
        prepare_segment(
            partition, segment, broker_id=1, now_ms=0, epochs=[], next_base_offset=following.base_offset
        )


def test_deep_checking_decodes_records_and_shallow_does_not(partition: PartitionDir) -> None:
    segment = partition.segments()[0]
    deep = BatchChecker(str(segment.log_path), segment.base_offset, deep=True)
    shallow = BatchChecker(str(segment.log_path), segment.base_offset)
    with segment.open() as source:
        assert all(not problems for _, _, problems in deep.batches_of(source))
    with segment.open() as source:
        assert all(not problems for _, _, problems in shallow.batches_of(source))
    assert deep.batches == shallow.batches > 0
    assert deep.valid_bytes == shallow.valid_bytes == segment.size()
    assert deep.finish(segment.size()) == []


def _append(path: Path, data: bytes) -> None:
    with path.open("ab") as out:
        out.write(data)


FILE_DAMAGES: dict[str, Callable[[PartitionDir], Path]] = {
    ".index partial entry": lambda p: _damaged(p.segments()[1].index_path, b"\x01\x02\x03"),
    ".timeindex partial entry": lambda p: _damaged(p.segments()[1].time_index_path, b"\x01\x02"),
    ".txnindex partial entry": lambda p: _damaged(_txn_index(p), b"\x00" * 20),
    ".snapshot trailing bytes": lambda p: _damaged(next(p.path.glob("*.snapshot")), b"zz"),
}


def _damaged(path: Path, tail: bytes) -> Path:
    _append(path, tail)
    return path


def _txn_index(partition: PartitionDir) -> Path:
    path = partition.segments()[1].txn_index_path
    path.touch()
    return path


@pytest.mark.parametrize("damage", list(FILE_DAMAGES))
def test_verify_checks_every_file_kind_dump_reads(
    partition: PartitionDir, damage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = FILE_DAMAGES[damage](partition)
    problems = [p for p in verify_partition(partition) if p.path == str(path)]
    assert problems, f"verify missed the damaged {path.name}"
    assert main(["log", "verify", str(partition.path)]) == 1
    assert main(["log", "verify", str(path)]) == 1
    assert main(["log", "dump", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.count(str(path)) >= 3 and "Traceback" not in err


def _legacy_segment(directory: Path) -> Segment:
    """v1 gzip wrappers of three records each (offsets 100-129), then v2 batches, with the offset
    index a broker before Kafka 2.0 wrote: each entry keyed by the first offset of its append, for
    a wrapper its first inner message's (Kafka 2.0 keys by the last offset; old logs keep theirs)."""
    wrappers = [
        encode_legacy_batch(
            [Record(o, 1000 + o, b"k", b"v" * 300) for o in range(f, f + 3)], magic=1, codec=Codec.GZIP
        )
        for f in range(100, 130, 3)
    ]
    modern = [encode_v2_batch([Record(o, 2000 + o, None, b"w" * 300)]) for o in range(130, 140)]
    directory.mkdir(parents=True)
    segment = Segment(directory, 100)
    segment.log_path.write_bytes(b"".join(wrappers + modern))
    rebuilt = rebuild_segment_indexes(segment, index_interval_bytes=600)
    old = OffsetIndex(100)
    for entry in rebuilt.offset_index.entries():
        header = next(segment.headers(entry.position))
        old.append(header.base_offset if header.base_offset >= 0 else header.last_offset - 2, entry.position)
    assert [e.offset for e in old.entries()] != [e.offset for e in rebuilt.offset_index.entries()]
    old.write(segment.index_path)
    rebuilt.time_index.write(segment.time_index_path)
    return segment


def test_an_index_keyed_by_a_legacy_wrappers_first_inner_offset_is_not_damage(tmp_path: Path) -> None:
    segment = _legacy_segment(tmp_path / "t-0")
    assert list(verify_segment(segment)) == []
    # An entry below the wrapper's first inner offset still is.
    index = OffsetIndex.load(segment.index_path, 100)
    first = index.entry(0)
    shifted = OffsetIndex(100)
    shifted.append(first.offset - 1, first.position)
    for entry in list(index.entries())[1:]:
        shifted.append(entry.offset, entry.position)
    shifted.write(segment.index_path)
    (problem,) = verify_segment(segment)
    assert problem.path == str(segment.index_path)
    assert f"is below the batch there (offsets {first.offset}..{first.offset + 2})" in problem.message
