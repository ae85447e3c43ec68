"""The aborted transactions of a segment's range, looked up per batch: which batches a
READ_COMMITTED reader leaves out (range streams, and the pipeline's jobs through
:mod:`rlm.pipeline.transactions`, which collects them)."""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from rlm.log.model import BatchHeader
from rlm.log.txnindex import AbortedTxn


class AbortedIndex:
    """The aborted transactions of one segment's range, looked up per batch."""

    def __init__(self, entries: Iterable[AbortedTxn]) -> None:
        ranges: dict[int, list[tuple[int, int]]] = {}
        for txn in entries:
            ranges.setdefault(txn.producer_id, []).append((txn.first_offset, txn.last_offset))
        self._firsts: dict[int, list[int]] = {}
        self._lasts: dict[int, list[int]] = {}
        for producer, spans in ranges.items():
            spans.sort()
            self._firsts[producer] = [first for first, _ in spans]
            self._lasts[producer] = [last for _, last in spans]

    def __bool__(self) -> bool:
        return bool(self._firsts)

    def is_aborted(self, header: BatchHeader) -> bool:
        """Whether the batch's records belong to an aborted transaction.

        A transactional data batch holds records of one transaction of one producer; it is aborted
        when an aborted transaction of that producer spans its base offset. Control batches and
        non-transactional batches are never aborted.
        """
        if header.is_control or not header.is_transactional:
            return False
        firsts = self._firsts.get(header.producer_id)
        if firsts is None:
            return False
        at = bisect.bisect_right(firsts, header.base_offset) - 1
        return at >= 0 and header.base_offset <= self._lasts[header.producer_id][at]
