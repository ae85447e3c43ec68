"""An incremental export after the remote copies were replaced from some offset on (the broker's
log diverged from them, an unclean leader election) exports the broker's records there: neither a
run planned before the replacement and committed after, nor a killed run's manifest, nor an
Iceberg table's snapshots raise the ledger past the replaced offset again.

Driver side only, without Spark: the tier holds segment rows (planned, not read), and the write of
the run's rows records what it was asked to write.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from urllib.parse import urlparse

import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from metadata.schema import upgrade
from metadata.store import SqlMetadataStore
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

TABLE = "kafka.records"


class Tier:
    """A SQLite store whose partition ``TP`` has offsets 0-199 tiered, leader epoch 4 then 5."""

    def __init__(self, root: Path) -> None:
        self.root = root
        url = f"sqlite:///{root / 'metadata.db'}"
        upgrade(url)
        self.store = SqlMetadataStore.open(url)
        self.spec = StorageSpec((root / "tier").as_uri())
        self.storage = self.spec.open()
        self.written: list[tuple[int, int]] = []
        self.during_write: Callable[[], None] = lambda: None
        add_finished(self.store, segment(0, 99, epochs=((4, 0),)), segment(100, 199, epochs=((5, 100),)))

    def diverge(self) -> None:
        """The broker's log parted from the copies at 100 (epoch 5 was an unclean leader's): its
        records from 100 on are tiered again, up to 149."""
        assert self.store.truncate_copies(TP, 100, event_time_ms=2) == 1
        add_finished(self.store, segment(100, 149, epochs=((6, 100),)))

    def write(self, stage: Stage, summaries: Sequence[SegmentSummary], directory: str) -> int:
        """Records what it was asked to write, and leaves one file without rows (so that an
        Iceberg run appends a snapshot)."""
        self.written += [(s.read_from, s.read_to) for s in summaries]
        path = Path(urlparse(directory).path if directory.startswith("file:") else directory)
        path.mkdir(parents=True, exist_ok=True)
        pq.write_table(TABLE_SCHEMA.empty_table(), path / f"part-{len(self.written)}.parquet")
        self.during_write()
        return 0

    def parquet(self, output: str) -> ExportReport:
        return export_parquet(
            self.store, self.storage, self.spec, run_in_process, self.write, LocalFiles(), options(output)
        )

    def iceberg(self, catalog: SqlCatalog) -> ExportReport:
        return export_iceberg(
            self.store,
            self.storage,
            self.spec,
            run_in_process,
            self.write,
            LocalFiles(),
            options(TABLE, ExportFormat.ICEBERG),
            catalog,
            self.warehouse,
        )

    @property
    def warehouse(self) -> str:
        return (self.root / "warehouse").as_uri()


@pytest.fixture
def tier(tmp_path: Path) -> Iterator[Tier]:
    made = Tier(tmp_path)
    try:
        yield made
    finally:
        made.store.close()
        made.storage.close()


@pytest.fixture
def catalog(tier: Tier) -> SqlCatalog:
    return open_catalog(f"sqlite:///{tier.root / 'catalog.db'}", tier.warehouse)


def options(output: str, fmt: ExportFormat = ExportFormat.PARQUET) -> ExportOptions:
    return ExportOptions(output, fmt, isolation=Isolation.READ_UNCOMMITTED, incremental=True)


def check_the_broker_records_are_exported_next(tier: Tier, report: ExportReport, ledger_key: str) -> None:
    """``report`` is the run after the divergence: it exported the broker's 100-149."""
    [partition] = report.partitions
    assert (partition.offsets.start, partition.next_offset) == (100, 150)
    assert tier.written[-1] == (100, 149)
    assert tier.store.export_offsets(ledger_key) == {TP: 150}


def test_a_parquet_run_planned_before_the_copies_were_replaced_is_held_below_them(
    tier: Tier, tmp_path: Path
) -> None:
    output = output_uri(str(tmp_path / "out"))
    tier.during_write = tier.diverge  # between the run's plan and its commit

    first = tier.parquet(output)

    assert tier.written == [(0, 99), (100, 199)]
    assert first.diverged == {TP: 100}
    assert first.to_json()["diverged_partitions"] == [{"topic": "orders", "partition": 0, "held_at": 100}]
    assert tier.store.export_offsets(output) == {TP: 100}
    tier.during_write = lambda: None
    check_the_broker_records_are_exported_next(tier, tier.parquet(output), output)


@pytest.mark.parametrize("manifest", ["with its lineage", "written before lineages"])
def test_a_killed_parquet_run_rolled_forward_after_the_copies_were_replaced_is_held_below_them(
    tier: Tier, tmp_path: Path, manifest: str
) -> None:
    output = output_uri(str(tmp_path / "out"))
    tier.store.record_export_offsets(output, {TP: 100})
    # A run planned at lineage 0, killed after its commit point, before the ledger's update.
    if manifest == "with its lineage":
        killed_run(output, Manifest("killed", (), {TP: 200}, {TP: None}, lineages={TP: 0}))
    else:  # taken as planned before every replacement
        entry = {"topic": TP.topic, "partition": 0, "next_offset": 200, "topic_id": None}
        killed_run(output, {"run_id": "killed", "files": [], "next_offsets": [entry]})
    tier.diverge()

    report = tier.parquet(output)

    assert report.settled.completed == ("killed",)
    assert report.diverged == {TP: 100}
    check_the_broker_records_are_exported_next(tier, report, output)


def test_an_iceberg_table_snapshot_of_the_replaced_copies_does_not_raise_the_ledger_again(
    tier: Tier, catalog: SqlCatalog
) -> None:
    first = tier.iceberg(catalog)
    assert first.snapshot_id is not None
    assert (first.diverged, tier.store.export_offsets(f"iceberg:{TABLE}")) == ({}, {TP: 200})
    tier.diverge()  # the ledger falls to 100; the table's snapshot still says 200

    check_the_broker_records_are_exported_next(tier, tier.iceberg(catalog), f"iceberg:{TABLE}")


def test_an_iceberg_run_planned_before_the_copies_were_replaced_is_held_below_them(
    tier: Tier, catalog: SqlCatalog
) -> None:
    tier.during_write = tier.diverge
    first = tier.iceberg(catalog)
    assert first.snapshot_id is not None and first.diverged == {TP: 100}
    assert tier.store.export_offsets(f"iceberg:{TABLE}") == {TP: 100}
    tier.during_write = lambda: None

    second = tier.iceberg(catalog)

    check_the_broker_records_are_exported_next(tier, second, f"iceberg:{TABLE}")
    assert second.diverged == {}  # the first run's snapshot, caught up again, is held but said once


def test_an_iceberg_snapshot_written_before_lineages_is_taken_as_planned_before_every_replacement(
    tier: Tier, catalog: SqlCatalog
) -> None:
    table = load_or_create(catalog, TABLE, tier.warehouse)
    empty = str(tier.root / "warehouse" / "old.parquet")
    pq.write_table(TABLE_SCHEMA.empty_table(), empty)
    entry = {"topic": TP.topic, "partition": 0, "next_offset": 200, "topic_id": None}
    table.add_files([empty], snapshot_properties={NEXT_OFFSETS: json.dumps([entry])})
    tier.store.record_export_offsets(f"iceberg:{TABLE}", {TP: 200})
    tier.diverge()

    check_the_broker_records_are_exported_next(tier, tier.iceberg(catalog), f"iceberg:{TABLE}")
