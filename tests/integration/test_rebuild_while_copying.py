"""``rlm spark rebuild-metadata --delete-orphans`` while a sidecar copies into the database it
rebuilds (started once the rebuild found it empty).

The copier adds a segment's ``COPY_SEGMENT_STARTED`` row before it uploads the ``.log``, then the
index object, then finishes the row. A rebuild that lists the keys between the two uploads finds
the copy incomplete; looking again before deleting it, the index may still be under way, and
deleted then, the copy would finish as a row whose ``.log`` is gone. The row names the copy all
along: the rebuild keeps a set a row of the database names.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest

from metadata.store import SqlMetadataStore
from rlm.metastore.model import TopicPartition
from rlm.pipeline.rebuild.job import RebuildOptions, rebuild
from rlm.pipeline.stage import run_in_process
from rlm.pipeline.storage import StorageSpec
from rlm.storage.delegate import DelegatingStorage
from rlm.storage.protocol import RemoteStorage
from tests.pipeline.tiers import AWS_ENV
from tests.tiering_support import WRITER_NOW_MS, Backend, SegmentPlan, Tiering, write_scripted_log_dir

TP = TopicPartition("orders", 0)


class CopierMeanwhile(DelegatingStorage):
    """The rebuild's storage: before it lists the keys, the copier starts and uploads a ``.log``
    (``started``); before the rebuild deletes, the copier finishes (``finish``)."""

    def __init__(self, inner: RemoteStorage, started: Callable[[], None], finish: Callable[[], None]) -> None:
        super().__init__(inner)
        self.started, self.finish = started, finish

    def list_keys(self, prefix: str = "") -> Iterator[str]:
        self.started()
        return self.inner.list_keys(prefix)

    def delete_objects(self, keys: Iterable[str]) -> None:
        self.finish()
        self.inner.delete_objects(keys)


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name, value in AWS_ENV.items():  # what the rebuild's own S3 clients read (moto takes any)
        monkeypatch.setenv(name, value)
    yield


@pytest.mark.usefixtures("aws")
def test_a_copy_under_way_while_orphans_are_deleted_keeps_its_objects(
    backend: Backend, tiering_factory: Callable[..., Tiering], tmp_path: Path
) -> None:
    log_dir = tmp_path / "logs"
    plans = [SegmentPlan(records=10, max_timestamp_ms=WRITER_NOW_MS - 1000 + i) for i in range(3)]
    write_scripted_log_dir(log_dir, {TP: plans})
    tiering = tiering_factory(backend, log_dir)
    uploaded, go_on = threading.Event(), threading.Event()

    def step(name: str) -> None:
        if name == "log_uploaded" and not uploaded.is_set():
            uploaded.set()
            assert go_on.wait(30)

    copying = threading.Thread(target=lambda: tiering.copier(step=step).run_once())

    def started() -> None:
        copying.start()
        assert uploaded.wait(30)

    def finish() -> None:
        go_on.set()
        copying.join(30)

    storage = CopierMeanwhile(tiering.storage, started, finish)
    with SqlMetadataStore.open(tiering.settings.metadata_url) as store:
        report = rebuild(
            store,
            storage,
            StorageSpec.from_settings(tiering.settings),
            run_in_process,
            RebuildOptions(delete_orphans=True),
        )
    assert not copying.is_alive()

    rows = tiering.finished(TP)
    assert [r.start_offset for r in rows] == [0, 10, 20]
    for row in rows:
        assert tiering.storage.object_size(row.layout.log_key) == row.size_bytes
        assert tiering.storage.object_size(row.layout.index_key) is not None
    (orphan,) = report.orphans
    assert orphan.reason.startswith("incomplete") and not orphan.deleted
    assert orphan.kept is not None and "a row of the metadata database names it" in orphan.kept
