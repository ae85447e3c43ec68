"""Runs of batches (a chunk's batches in one list) gathered into groups: the groups depend on the
batches alone, not on how they came split into runs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from hypothesis import given
from hypothesis import strategies as st

from rlm.log.model import BatchHeader
from rlm.stream.chunks import StreamBatch
from rlm.stream.service import group_batches


def batch(i: int, size: int, records: int) -> StreamBatch:
    header = BatchHeader(0, i, i, size, 0, 2, 0, 0, 0, 0, -1, -1, -1, records)
    return StreamBatch(header, b"x" * size, "remote", "obj")


def grouped(runs: list[list[StreamBatch]], size: int, records: int | None) -> list[list[int]]:
    async def produce() -> AsyncIterator[list[StreamBatch]]:
        for run in runs:
            yield run

    async def collect() -> list[list[int]]:
        return [
            [b.header.base_offset for b in group] async for group in group_batches(produce(), size, records)
        ]

    return asyncio.run(collect())


@given(
    st.lists(st.tuples(st.integers(1, 50), st.integers(0, 9)), min_size=1, max_size=40),
    st.lists(st.integers(1, 7), min_size=1, max_size=40),
    st.integers(1, 200),
    st.none() | st.integers(1, 30),
)
def test_groups_do_not_depend_on_the_runs(
    shapes: list[tuple[int, int]], cuts: list[int], size: int, records: int | None
) -> None:
    batches = [batch(i, length, count) for i, (length, count) in enumerate(shapes)]
    runs, at = [], 0
    for cut in cuts * len(batches):
        if at >= len(batches):
            break
        runs.append(batches[at : at + cut])
        at += cut
    one_by_one = grouped([[b] for b in batches], size, records)
    assert grouped(runs, size, records) == one_by_one
    assert [o for group in one_by_one for o in group] == list(range(len(batches)))
    for group in one_by_one[:-1]:  # each group but the last ends at the batch reaching a bound
        held = sum(shapes[o][0] for o in group)
        count = sum(max(1, shapes[o][1]) for o in group)
        assert held >= size or (records is not None and count >= records)
        assert held - shapes[group[-1]][0] < size
