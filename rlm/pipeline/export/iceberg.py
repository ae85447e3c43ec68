"""Iceberg output of ``rlm spark export``: one snapshot per run, through pyiceberg's SQL catalog.

Spark writes the run's rows as Parquet files under the table's location
(``<location>/data/rlm-<run id>/``); the driver then adds every file to the table in one commit
(:meth:`pyiceberg.table.Table.add_files`), which is the run's snapshot and its commit point: a run
killed before it leaves only files no snapshot references, which no reader sees. The snapshot's
summary records where the next incremental run starts in each partition (``rlm.next-offsets``),
so the ledger, advanced after the commit, is caught up from the table when a run died between
the two: nothing is exported twice. Each offset is recorded with the topic id it is one of (the
partition's when the run planned it): one of a topic deleted and created again since does not
move the new topic's ledger (see :mod:`metadata.exports`). A table's snapshots written before
ids were recorded name none: their offsets only raise an offset the ledger holds for the
partition's current topic, never bring back one the ledger forgot. Each offset also carries the
partition's lineage when the run planned: catching up after the remote copies were replaced from
some offset on (an unclean leader election) does not raise the ledger past that offset again.

The catalog is ``export.iceberg.catalog.url`` (SQLAlchemy), by default the metadata database; on
PostgreSQL its tables live in a schema of their own, ``rlm_iceberg``. The table is created on the
first run (unpartitioned, the export's columns) under ``export.iceberg.warehouse``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple
from uuid import UUID

import pyarrow as pa
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from rlm.errors import ConfigError
from rlm.metastore.model import TopicPartition
from rlm.metastore.protocol import MetadataStore
from rlm.pipeline.columns import EXPORT_COLUMNS
from rlm.pipeline.export.commit import data_files, new_run_id
from rlm.pipeline.export.files import Files, join
from rlm.pipeline.export.job import (
    ExportFormat,
    ExportOptions,
    ExportReport,
    Write,
    check_ledger,
    plan_export,
    record_offsets,
)
from rlm.pipeline.export.rows import EXPORT_SCHEMA, export_stage
from rlm.pipeline.stage import Collect
from rlm.pipeline.storage import StorageSpec
from rlm.storage.protocol import RemoteStorage

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.table import Table

#: The PostgreSQL schema of the catalog's tables.
CATALOG_SCHEMA = "rlm_iceberg"
CATALOG_NAME = "rlm"
#: The snapshot summary property holding the next offsets.
NEXT_OFFSETS = "rlm.next-offsets"
#: The table's columns: the export's, timestamps in microseconds (Iceberg's unit).
TABLE_SCHEMA = pa.schema(
    [
        f.with_type(pa.timestamp("us", tz="UTC")) if isinstance(f.type, pa.TimestampType) else f
        for f in (EXPORT_SCHEMA.field(name) for name in EXPORT_COLUMNS)
    ]
)


def catalog_url(metadata_url: str, catalog_url: str | None) -> str:
    """The catalog's SQLAlchemy URL: ``catalog_url``, else the metadata database's, on PostgreSQL
    with the catalog's own schema first on the search path."""
    url = make_url(catalog_url or metadata_url)
    if url.get_backend_name() == "postgresql":
        url = url.update_query_dict({"options": f"-csearch_path={CATALOG_SCHEMA}"})
    return url.render_as_string(hide_password=False)


def open_catalog(url: str, warehouse: str | None) -> SqlCatalog:
    """The SQL catalog at ``url`` (its schema created on PostgreSQL when missing).

    Raises:
        ConfigError: The catalog cannot be opened.
    """
    from pyiceberg.catalog.sql import SqlCatalog

    parsed = make_url(url)
    if parsed.get_backend_name() == "postgresql":
        engine = create_engine(parsed.set(query={}))
        try:
            with engine.begin() as conn:
                conn.execute(text(f"CREATE SCHEMA IF NOT EXISTS {CATALOG_SCHEMA}"))
        finally:
            engine.dispose()
    properties = {"uri": url}
    if warehouse:
        properties["warehouse"] = warehouse
    try:
        return SqlCatalog(CATALOG_NAME, **properties)
    except Exception as exc:  # pyiceberg and SQLAlchemy raise many kinds
        where = parsed.render_as_string(hide_password=True)
        raise ConfigError(f"cannot open the Iceberg catalog at {where}: {exc}") from exc


def identifier(output: str) -> tuple[str, str]:
    """``namespace.table`` as its two parts.

    Raises:
        ConfigError: ``output`` is not ``namespace.table``.
    """
    namespace, dot, name = output.rpartition(".")
    if not dot or not namespace or not name or "/" in output:
        raise ConfigError(f"--output {output!r}: an Iceberg table is named namespace.table")
    return namespace, name


def load_or_create(catalog: SqlCatalog, output: str, warehouse: str | None) -> Table:
    """The table ``output``, created (with its namespace) when missing.

    Raises:
        ConfigError: The table is missing and no warehouse is set to create it in.
    """
    namespace, name = identifier(output)
    if catalog.table_exists((namespace, name)):
        return catalog.load_table((namespace, name))
    if not warehouse:
        raise ConfigError(
            f"Iceberg table {output} does not exist: set export.iceberg.warehouse to create it there"
        )
    catalog.create_namespace_if_not_exists(namespace)
    return catalog.create_table_if_not_exists((namespace, name), schema=TABLE_SCHEMA)


class Committed(NamedTuple):
    """A partition's next offset as the table's snapshots recorded it."""

    next_offset: int
    topic_id: UUID | None
    """The topic id it is one of; ``None``: the partition had none when the run planned it."""
    named: bool
    """Whether the snapshot recorded ids at all (not one written before they were)."""
    lineage: int = 0
    """The partition's lineage when the run planned (0: the snapshot recorded none)."""


def committed_offsets(table: Table) -> dict[TopicPartition, list[Committed]]:
    """The next offsets recorded by the table's runs: of each partition, the highest per lineage
    of the topic id the latest snapshot naming the partition recorded."""
    found: dict[TopicPartition, dict[int, Committed]] = {}
    for snapshot in table.snapshots():  # in commit order
        summary = snapshot.summary
        recorded = summary.additional_properties.get(NEXT_OFFSETS) if summary is not None else None
        if recorded is None:
            continue
        for entry in json.loads(recorded):
            tp = TopicPartition(entry["topic"], int(entry["partition"]))
            named = "topic_id" in entry
            topic_id = UUID(entry["topic_id"]) if entry.get("topic_id") is not None else None
            now = Committed(int(entry["next_offset"]), topic_id, named, int(entry.get("lineage", 0)))
            series = found.setdefault(tp, {})
            if any((c.topic_id, c.named) != (topic_id, named) for c in series.values()):
                series.clear()  # another topic's: the latest snapshot's id is the one
            before = series.get(now.lineage)
            if before is None or before.next_offset < now.next_offset:
                series[now.lineage] = now
    return {tp: sorted(series.values(), key=lambda c: c.lineage) for tp, series in found.items()}


def catch_up(
    store: MetadataStore, ledger_key: str, committed: Mapping[TopicPartition, Sequence[Committed]]
) -> None:
    """Record in the ledger what the table's snapshots say a run exported (a run that died after
    its commit and before the ledger's update); see :func:`~rlm.pipeline.export.job.record_offsets`
    for offsets recorded without ids, and for offsets of runs planned before copies were
    replaced, which stay held (said when their run committed, not again at every catch-up)."""
    rounds: list[dict[TopicPartition, Committed]] = []
    for tp, series in committed.items():
        for i, c in enumerate(series):
            if i == len(rounds):
                rounds.append({})
            rounds[i][tp] = c
    for each in rounds:
        named = {tp: c for tp, c in each.items() if c.named}
        unnamed = {tp: c for tp, c in each.items() if not c.named}
        for chosen, ids in ((named, {tp: c.topic_id for tp, c in named.items()}), (unnamed, None)):
            if chosen:
                offsets = {tp: c.next_offset for tp, c in chosen.items()}
                lineages = {tp: c.lineage for tp, c in chosen.items()}
                record_offsets(store, ledger_key, offsets, ids, lineages, quiet=True)


def append_files(
    table: Table,
    files: list[str],
    next_offsets: Mapping[TopicPartition, int],
    run_id: str,
    topic_ids: Mapping[TopicPartition, UUID | None] | None = None,
    lineages: Mapping[TopicPartition, int] | None = None,
) -> int:
    """Add the run's files to the table in one snapshot; returns its id."""
    ids = topic_ids or {}
    planned = lineages or {}
    properties = {
        "rlm.run-id": run_id,
        NEXT_OFFSETS: json.dumps(
            [
                {
                    "topic": tp.topic,
                    "partition": tp.partition,
                    "next_offset": offset,
                    "topic_id": None if ids.get(tp) is None else str(ids[tp]),
                    "lineage": planned.get(tp, 0),
                }
                for tp, offset in sorted(next_offsets.items())
            ],
            separators=(",", ":"),
        ),
    }
    table.add_files(files, snapshot_properties=properties)
    snapshot = table.refresh().current_snapshot()
    assert snapshot is not None
    return snapshot.snapshot_id


def export_iceberg(
    store: MetadataStore,
    storage: RemoteStorage,
    spec: StorageSpec,
    collect: Collect,
    write: Write,
    files: Files,
    options: ExportOptions,
    catalog: SqlCatalog,
    warehouse: str | None,
) -> ExportReport:
    """Append the records ``options`` select to the Iceberg table ``options.output``, as one snapshot.

    Raises:
        ConfigError: The output is no table name, or the table is missing and no warehouse is set.
        InvalidArgumentError: Not incremental, and the table holds an export already.
        RlmError: The store or the storage failed; no snapshot was added.
    """
    started = time.monotonic()
    ledger_key = f"iceberg:{options.output}"
    table = load_or_create(catalog, options.output, warehouse)
    catch_up(store, ledger_key, committed_offsets(table))
    ledger = store.export_offsets(ledger_key)
    check_ledger(options.output, options, ledger)
    plan = plan_export(store, storage, spec, collect, options, ledger)
    run_id = new_run_id()
    directory = join(table.location(), f"data/rlm-{run_id}")
    summaries = plan.summaries
    rows = write(export_stage(spec, options.isolation), summaries, directory) if summaries else 0
    written = [join(directory, name) for name in data_files(files, directory)]
    next_offsets, topic_ids, lineages = plan.next_offsets(), plan.topic_ids(), plan.lineages()
    snapshot = append_files(table, written, next_offsets, run_id, topic_ids, lineages) if written else None
    diverged = record_offsets(store, ledger_key, next_offsets, topic_ids, lineages)
    return ExportReport(
        options.output,
        ExportFormat.ICEBERG,
        run_id,
        rows,
        len(written),
        time.monotonic() - started,
        plan.partitions(),
        snapshot_id=snapshot,
        diverged=diverged,
    )
