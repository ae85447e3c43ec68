"""``rlm spark export --format iceberg``: each run one snapshot of a table in rlm's SQL catalog.

The catalog is the tier's metadata database (SQLite, or PostgreSQL in its own schema); the data
files are written by Spark under a local warehouse. A reader with pyiceberg sees every run as a
snapshot, and the table's rows equal kafka-python's decoding of the tiered segments.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from rlm.cli import main
from rlm.pipeline.export.iceberg import CATALOG_SCHEMA, catalog_url, open_catalog
from tests.pipeline.export_support import exported, normalized, oracle_rows
from tests.pipeline.tiers import Tier

pytestmark = pytest.mark.usefixtures("aws_env")
TABLE = "kafka.records"


def _export(capsys: pytest.CaptureFixture[str], tier: Tier, *args: str) -> tuple[int, dict[str, Any]]:
    code = main(
        [
            *("spark", "export", "--config", str(tier.config), "--quiet", "--json"),
            *("--format", "iceberg", "--output", TABLE, *args),
        ]
    )
    captured = capsys.readouterr()
    return code, json.loads(captured.out) if code == 0 else {"error": captured.err}


def test_every_run_is_a_snapshot_readable_with_pyiceberg(
    spark: SparkSession,
    healthy_tier: Tier,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RLM_EXPORT_ICEBERG_WAREHOUSE", (tmp_path / "warehouse").as_uri())
    oracle = oracle_rows(healthy_tier)
    expected = exported(oracle)
    stamps = sorted(r["timestamp"] for r in oracle if r["timestamp"] is not None)
    code, first = _export(capsys, healthy_tier, "--incremental", "--to", str(stamps[len(stamps) // 2]))
    assert code == 0, first
    code, second = _export(capsys, healthy_tier, "--incremental")
    assert code == 0, second
    assert first["snapshot_id"] != second["snapshot_id"]
    assert first["rows"] + second["rows"] == len(expected) and first["rows"] > 0 and second["rows"] > 0

    url = catalog_url(healthy_tier.settings.metadata_url, None)
    if "postgresql" in url:
        assert CATALOG_SCHEMA in url
    table = open_catalog(url, None).load_table(TABLE)
    snapshots = table.snapshots()
    assert [s.snapshot_id for s in snapshots] == [first["snapshot_id"], second["snapshot_id"]]
    assert normalized(table.scan().to_arrow()) == expected
    assert len(normalized(table.scan(snapshot_id=first["snapshot_id"]).to_arrow())) == first["rows"]

    code, again = _export(capsys, healthy_tier, "--incremental")
    assert (code, again["rows"], again["snapshot_id"]) == (0, 0, None)
    assert len(table.refresh().snapshots()) == 2
    code, refused = _export(capsys, healthy_tier)
    assert code == 1 and "holds an export already" in refused["error"]
