"""The aborted transactions a job attaches to the segments it reads, where a diverged copy is kept
past the offset another copy answers from (:mod:`rlm.lookup.answer_end`).

The old leader's copy is read up to the offset before the copy that reaches past it starts
(:func:`rlm.remote_tier.read_plan.summarize`); its transaction index also names transactions it
aborted past there, which the log may have committed: a ``read_committed`` export would leave the
new leader's records of the same producer there out. The range streams leave those entries out
too (:mod:`tests.integration.test_stream_aborted_across_a_cut`, whose copies these are).
"""

from __future__ import annotations

from pathlib import Path

from rlm.pipeline.stage import run_in_process
from rlm.pipeline.storage import StorageSpec
from rlm.pipeline.transactions import attach_aborted
from rlm.remote_tier.read_plan import plan_partition, select_partitions
from rlm.storage.filesystem import FilesystemStorage
from tests.clock import FakeClock
from tests.integration.test_stream_aborted_across_a_cut import BELOW, NEWER, PAST, _copy
from tests.metadata_support import TP, add_finished, open_store, sqlite_copy


def test_a_diverged_copys_aborts_past_where_it_is_read_are_not_attached(
    sqlite_template: Path, tmp_path: Path
) -> None:
    store = open_store(sqlite_copy(sqlite_template, tmp_path), FakeClock())
    remote = tmp_path / "remote"
    storage = FilesystemStorage(remote)
    try:
        add_finished(store, _copy(storage, 0, 29, BELOW, PAST), _copy(storage, 20, 39, NEWER))
        (record,) = select_partitions(store, [TP.topic])
        spec = StorageSpec(remote.as_uri())
        (plan,) = attach_aborted([plan_partition(store, record)], spec, run_in_process)
        # PAST (the old leader's abort at 25..27) is not the log's: the new leader's records of
        # the producer there are not taken for aborted ones.
        assert [(s.read_from, s.read_to, sorted(s.aborted)) for s in plan.segments] == [
            (0, 19, [BELOW]),
            (20, 39, [NEWER]),
        ]
    finally:
        store.close()
