"""``rlm spark compact`` from the command line (on the test session's SparkSession)."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
import yaml
from pyspark.sql import SparkSession

from rlm.cli import main
from rlm.metastore.model import TopicPartition
from tests.pipeline.compact.support import TOPIC, survivors, write_keyed_log
from tests.pipeline.conftest import make_tier

pytestmark = pytest.mark.usefixtures("aws_env")


def test_compact_dry_run_then_compact_then_refuse(
    spark: SparkSession, request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tier = make_tier("sqlite-fs", request, tmp_path, functools.partial(write_keyed_log, seed=3, batches=30))
    config = yaml.safe_load(tier.config.read_text())
    config["topics"] = {TOPIC: {"cleanup.policy": "compact", "compaction.strategy": "timestamp"}}
    compacted = tmp_path / "compacted.yaml"
    compacted.write_text(yaml.safe_dump(config))
    before = survivors(tier, TopicPartition(TOPIC, 0))

    assert main(["spark", "compact", "--config", str(compacted), "--dry-run", "--json", "--quiet"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["dry_run"] and [p["status"] for p in report["partitions"]] == ["would compact"] * 2
    assert all(p["records_in"] > p["records_out"] for p in report["partitions"])
    assert survivors(tier, TopicPartition(TOPIC, 0)) == before

    assert main(["spark", "compact", "--config", str(compacted), "--topic", TOPIC, "--quiet"]) == 0
    out = capsys.readouterr().out
    assert f"{TOPIC}-0: compacted" in out and "tombstones kept" in out
    assert len(survivors(tier, TopicPartition(TOPIC, 0))) < len(before)

    assert main(["spark", "compact", "--config", str(tier.config), "--topic", TOPIC, "--quiet"]) == 1
    assert f"topic {TOPIC!r} has cleanup.policy=delete" in capsys.readouterr().err
