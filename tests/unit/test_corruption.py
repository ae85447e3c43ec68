"""Damaged segments and indexes: clear errors naming the place, never a crash or a hang."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlm.errors import CorruptDataError
from rlm.log.logdir import PartitionDir
from rlm.log.produce import ProduceSpec, produce
from rlm.log.verify import verify_path

SPEC = ProduceSpec(topics=1, partitions=1, records=400, segment_bytes=16 * 1024, legacy_batches=3, seed=5)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pristine") / "logs"
    produce(root, SPEC)
    assert verify_path(root) == []
    return root / "orders-0"


def _exercise(partition: Path) -> list[str]:
    """Everything a reader does; only CorruptDataError may come out of a read."""
    problems = [str(p) for p in verify_path(partition)]
    part = PartitionDir(partition)
    for target in (0, 1_700_000_000_000, 1_700_000_010_000, 2_000_000_000_000):
        try:
            part.find_offset_by_timestamp(target)
        except CorruptDataError as exc:
            assert exc.path is not None and exc.position is not None, exc
    for segment in part.segments():
        try:
            for header in segment.headers():
                segment.read_records(header)
        except CorruptDataError as exc:
            assert str(segment.log_path) in str(exc) and exc.position is not None
    return problems


corruption = st.lists(
    st.tuples(st.floats(min_value=0, max_value=0.999), st.integers(min_value=1, max_value=255)),
    min_size=1,
    max_size=4,
)


@settings(max_examples=40, deadline=5000, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flips=corruption, which=st.integers(min_value=0, max_value=10), kind=st.sampled_from(["log", "index"]))
def test_flipped_bytes_are_reported_not_crashed(
    pristine: Path, flips: list[tuple[float, int]], which: int, kind: str
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        partition = Path(tmp) / "orders-0"
        shutil.copytree(pristine, partition)
        segments = PartitionDir(partition).segments()
        segment = segments[which % len(segments)]
        target = segment.log_path if kind == "log" else segment.time_index_path
        original = target.read_bytes()
        if not original:
            return
        data = bytearray(original)
        for where, mask in flips:
            data[int(where * len(data))] ^= mask
        target.write_bytes(bytes(data))
        problems = _exercise(partition)
        if kind == "log" and _changes_covered_bytes(segment, original, bytes(data)):
            assert problems


def _changes_covered_bytes(segment: object, before: bytes, after: bytes) -> bool:
    """Whether a change touches bytes outside the base offset and leader epoch of a batch
    (the only fields no checksum, length or magic check covers)."""
    from rlm.log.byte_source import BytesSource, iter_headers

    headers = list(iter_headers(BytesSource(before)))
    for i, (a, b) in enumerate(zip(before, after, strict=True)):
        if a == b:
            continue
        batch = next(h for h in headers if h.position <= i < h.end_position)
        rel = i - batch.position
        free = range(8) if batch.magic < 2 else [*range(8), *range(12, 16)]
        if rel not in free:
            return True
    return False


@settings(max_examples=25, deadline=5000, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.floats(min_value=0.0, max_value=0.999), which=st.integers(min_value=0, max_value=10))
def test_truncated_rolled_segment_is_reported(pristine: Path, cut: float, which: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        partition = Path(tmp) / "orders-0"
        shutil.copytree(pristine, partition)
        segments = PartitionDir(partition).segments()[:-1]
        segment = segments[which % len(segments)]
        data = segment.log_path.read_bytes()
        segment.log_path.write_bytes(data[: int(cut * len(data))])
        problems = _exercise(partition)
        assert any(str(segment.log_path) in p or str(segment.time_index_path) in p for p in problems)


@pytest.mark.parametrize(
    ("garbage", "expected"),
    [
        (b"\x00" * 8 + b"\x7f\xff\xff\xff", "size field"),  # a size of 2^31-1 runs past the file
        (b"\x00" * 8 + b"\x00\x00\x00\x05", "size field 5"),
        (b"\x00" * 8 + b"\x00\x00\x00\x40" + b"\x00\x00\x00\x00\x07", "unknown magic byte 7"),
    ],
)
def test_bad_batch_headers_name_file_and_position(
    pristine: Path, tmp_path: Path, garbage: bytes, expected: str
) -> None:
    partition = tmp_path / "orders-0"
    shutil.copytree(pristine, partition)
    segment = PartitionDir(partition).segments()[0]
    data = segment.log_path.read_bytes()
    first = next(iter(segment.headers()))
    patched = (
        data[: first.end_position] + garbage + bytes(200) + data[first.end_position + len(garbage) + 200 :]
    )
    segment.log_path.write_bytes(patched)
    problems = verify_path(partition)
    hit = [p for p in problems if p.path == str(segment.log_path) and p.position == first.end_position]
    if expected == "size field":
        # a size that runs past the file is a torn tail for a reader, trailing bytes for verify
        assert any("trailing bytes" in p.message for p in problems if p.path == str(segment.log_path))
    else:
        assert hit and expected in hit[0].message, problems
