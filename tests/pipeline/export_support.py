"""What the export tests compare: exported Parquet read back, and kafka-python's records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds

from rlm.pipeline.columns import EXPORT_COLUMNS
from rlm.pipeline.plan import PartitionPlan, plan_partition, select_partitions
from tests.pipeline.test_columns import _oracle
from tests.pipeline.tiers import Tier

Row = dict[str, Any]


def _key(row: Row) -> tuple[str, int, int]:
    return (row["topic"], row["partition"], row["offset"])


def oracle_rows(tier: Tier) -> list[Row]:
    """Every record of the tier's finished segments as kafka-python decodes them (control records
    included, aborted flags from the markers), in (topic, partition, offset) order."""
    with tier.open_store() as store:
        plans: list[PartitionPlan] = [plan_partition(store, r) for r in select_partitions(store)]
    return sorted(_oracle(tier, plans), key=_key)


def exported(rows: list[Row], *, committed: bool = True) -> list[Row]:
    """The export's columns of the data records among ``rows`` (aborted ones left out when
    ``committed``)."""
    return [
        {name: row[name] for name in EXPORT_COLUMNS}
        for row in rows
        if not row["is_control"] and not (committed and row["aborted"])
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
