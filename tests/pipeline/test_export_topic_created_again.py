"""An incremental export of a topic deleted and created again under the same name starts at the
new topic's start: neither the ledger, nor a killed run's manifest, nor an Iceberg table's
snapshots bring the deleted topic's offsets back.

Driver side only, without Spark: the tier holds segment rows (the new topic's are planned, not
read), and the write of the run's rows records what it was asked to write.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from metadata.schema import upgrade
from metadata.store import SqlMetadataStore
from rlm.metastore import RemoteSegment
from rlm.pipeline.export.commit import Manifest
from rlm.pipeline.export.files import LocalFiles
from rlm.pipeline.export.iceberg import (
    NEXT_OFFSETS,
    TABLE_SCHEMA,
    export_iceberg,
    load_or_create,
    open_catalog,
)
from rlm.pipeline.export.job import ExportFormat, ExportOptions, ExportReport, export_parquet, output_uri
from rlm.pipeline.export.rows import Isolation
from rlm.pipeline.stage import Stage, run_in_process
from rlm.pipeline.storage import StorageSpec
from rlm.remote_tier.read_plan import SegmentSummary
from tests.metadata_support import TP, add_finished, segment
from tests.pipeline.export_support import killed_run

OLD = uuid.UUID("11111111-1111-4111-8111-111111111111")
NEW = uuid.UUID("22222222-2222-4222-8222-222222222222")
TABLE = "kafka.records"


def of(topic_id: uuid.UUID, start: int, end: int) -> RemoteSegment:
    return dataclasses.replace(segment(start, end), topic_id=topic_id)


class Tier:
    """A SQLite store whose partition ``TP`` exported up to 10,000 of the old topic, which was
    then deleted and created again: its offsets 0-99 are tiered."""

    def __init__(self, root: Path) -> None:
        url = f"sqlite:///{root / 'metadata.db'}"
        upgrade(url)
        self.store = SqlMetadataStore.open(url)
        self.spec = StorageSpec((root / "tier").as_uri())
        self.storage = self.spec.open()
        self.written: list[tuple[int, int]] = []

    def recreate(self) -> None:
        self.store.adopt_topic_id(TP, NEW, event_time_ms=2)
        add_finished(self.store, of(NEW, 0, 99))

    def write(self, stage: Stage, summaries: Sequence[SegmentSummary], directory: str) -> int:
        self.written += [(s.read_from, s.read_to) for s in summaries]
        return 0


@pytest.fixture
def tier(tmp_path: Path) -> Iterator[Tier]:
    made = Tier(tmp_path)
    add_finished(made.store, of(OLD, 0, 9_999))
    made.store.adopt_topic_id(TP, OLD, event_time_ms=1)
    try:
        yield made
    finally:
        made.store.close()
        made.storage.close()


def options(output: str, fmt: ExportFormat = ExportFormat.PARQUET) -> ExportOptions:
    return ExportOptions(output, fmt, isolation=Isolation.READ_UNCOMMITTED, incremental=True)


def check_exported_from_the_start(tier: Tier, report: ExportReport, ledger_key: str) -> None:
    [partition] = report.partitions
    assert (partition.offsets.start, partition.next_offset) == (0, 100)
    assert tier.written == [(0, 99)]
    assert tier.store.export_offsets(ledger_key) == {TP: 100}


@pytest.mark.parametrize("manifest", ["without ids", "with ids"])
def test_a_parquet_export_starts_the_new_topic_at_its_start(
    tier: Tier, tmp_path: Path, manifest: str
) -> None:
    output = output_uri(str(tmp_path / "out"))
    tier.store.record_export_offsets(output, {TP: 10_000})
    # A run of the old topic killed after its commit point, before the ledger's update.
    if manifest == "with ids":
        files = killed_run(output, Manifest("killed", (), {TP: 10_000}, {TP: OLD}))
    else:  # written before ids were
        entry = {"topic": TP.topic, "partition": 0, "next_offset": 10_000}
        files = killed_run(output, {"run_id": "killed", "files": [], "next_offsets": [entry]})
    tier.recreate()

    report = export_parquet(
        tier.store, tier.storage, tier.spec, run_in_process, tier.write, files, options(output)
    )

    assert report.settled.completed == ("killed",)
    check_exported_from_the_start(tier, report, output)


@pytest.mark.parametrize("summary", ["without ids", "with ids"])
def test_an_iceberg_export_starts_the_new_topic_at_its_start(
    tier: Tier, tmp_path: Path, summary: str
) -> None:
    warehouse = (tmp_path / "warehouse").as_uri()
    catalog = open_catalog(f"sqlite:///{tmp_path / 'catalog.db'}", warehouse)
    table = load_or_create(catalog, TABLE, warehouse)
    empty = str(tmp_path / "warehouse" / "old.parquet")
    pq.write_table(TABLE_SCHEMA.empty_table(), empty)
    entry: dict[str, object] = {"topic": TP.topic, "partition": 0, "next_offset": 10_000}
    if summary == "with ids":
        entry["topic_id"] = str(OLD)
    # The old topic's run, whose ledger update was lost: its snapshot alone says where it stopped.
    table.add_files([empty], snapshot_properties={NEXT_OFFSETS: json.dumps([entry])})
    tier.recreate()

    report = export_iceberg(
        tier.store,
        tier.storage,
        tier.spec,
        run_in_process,
        tier.write,
        LocalFiles(),
        options(TABLE, ExportFormat.ICEBERG),
        catalog,
        warehouse,
    )

    check_exported_from_the_start(tier, report, f"iceberg:{TABLE}")
