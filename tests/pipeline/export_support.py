"""What the export tests compare: exported Parquet read back, and kafka-python's records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds

from rlm.pipeline.columns import EXPORT_COLUMNS
from rlm.pipeline.export.commit import Manifest, manifest_path, staging_dir, write_manifest
from rlm.pipeline.export.files import LocalFiles
from rlm.remote_tier.read_plan import PartitionPlan, plan_partition, select_partitions
from tests.pipeline.test_columns import _oracle
from tests.pipeline.tiers import Tier

Row = dict[str, Any]


def _key(row: Row) -> tuple[str, int, int]:
    return (row["topic"], row["partition"], row["offset"])


def oracle_rows(tier: Tier) -> list[Row]:
    """Every record of the tier's finished segments as kafka-python decodes them (control records
    included, aborted flags from the markers, ``unstable`` flags from :func:`stable_ends`), in
    (topic, partition, offset) order."""
    with tier.open_store() as store:
        plans: list[PartitionPlan] = [plan_partition(store, r) for r in select_partitions(store)]
    rows = sorted(_oracle(tier, plans), key=_key)
    ends = stable_ends(rows)
    for row in rows:
        row["unstable"] = row["offset"] >= ends.get((row["topic"], row["partition"]), 2**63)
    return rows


def stable_ends(rows: list[Row]) -> dict[tuple[str, int], int]:
    """Per partition of ``rows`` (every record of the tier, in offset order), the first offset of
    a transaction no later marker of its producer ends: where a read_committed reader of the tier
    stops. Partitions with no such transaction are left out."""
    open_first: dict[tuple[str, int], dict[int, int]] = {}
    for row in rows:
        ongoing = open_first.setdefault((row["topic"], row["partition"]), {})
        if row["is_control"]:
            ongoing.pop(row["producer_id"], None)
        elif row["is_transactional"]:
            ongoing.setdefault(row["producer_id"], row["offset"])
    return {tp: min(ongoing.values()) for tp, ongoing in open_first.items() if ongoing}


def exported(rows: list[Row], *, committed: bool = True) -> list[Row]:
    """The export's columns of the data records among ``rows`` (when ``committed``, aborted ones
    and those at or after the partition's tiered last stable offset left out)."""
    return [
        {name: row[name] for name in EXPORT_COLUMNS}
        for row in rows
        if not row["is_control"] and not (committed and (row["aborted"] or row["unstable"]))
    ]


def normalized(table: pa.Table) -> list[Row]:
    """A table read back as rows of the export's columns, timestamps as epoch milliseconds, in
    (topic, partition, offset) order."""
    rows = []
    for row in table.select(list(EXPORT_COLUMNS)).to_pylist():
        stamp = row["timestamp"]
        row["timestamp"] = None if stamp is None else int(stamp.timestamp() * 1000)
        row["partition"] = int(row["partition"])
        row["headers"] = [{"key": h["key"], "value": h["value"]} for h in row["headers"]]
        rows.append(row)
    return sorted(rows, key=_key)


def read_pyarrow(output: Path) -> list[Row]:
    """The exported rows as pyarrow's dataset reader sees the output (Hive partitioning)."""
    if not any(output.glob("topic=*")):
        return []  # no file: no schema to read
    return normalized(ds.dataset(output, format="parquet", partitioning="hive").to_table())


def read_duckdb(output: Path) -> list[Row]:
    """The exported rows as DuckDB reads them."""
    import duckdb

    pattern = f"{output}/topic=*/partition=*/date=*/*.parquet"
    with duckdb.connect() as db:
        db.execute("SET TimeZone = 'UTC'")
        table = db.sql(f"SELECT * FROM read_parquet('{pattern}', hive_partitioning = true)").arrow()
    return normalized(table.read_all() if isinstance(table, pa.RecordBatchReader) else table)


def killed_run(output: str, manifest: Manifest | dict[str, Any]) -> LocalFiles:
    """Leave in ``output`` what a run killed after its commit point, before the ledger's update,
    leaves: its staging directory and its manifest (one rlm writes, or a JSON document as an
    older rlm wrote it). Returns the files to export with."""
    files = LocalFiles()
    run_id = manifest.run_id if isinstance(manifest, Manifest) else str(manifest["run_id"])
    files.make_dirs([staging_dir(output, run_id)])
    if isinstance(manifest, Manifest):
        write_manifest(files, output, manifest)
    else:
        files.write_text(manifest_path(output, run_id), json.dumps(manifest))
    return files
