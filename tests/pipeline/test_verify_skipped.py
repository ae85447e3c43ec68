"""``rlm spark verify`` and skipped ranges: a segment the copier could not copy, skipped by an
operator with ``rlm copy skip``, leaves offsets no finished segment holds; verify lists the
skipped range and reports no gap for it (the rule for partly covered gaps is in
``test_continuity.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from rlm.cli import main
from rlm.metastore.model import TopicPartition
from tests.pipeline.conftest import make_tier
from tests.pipeline.tiers import Tier
from tests.tiering_support import WRITER_NOW_MS, SegmentPlan, write_scripted_log_dir

pytestmark = pytest.mark.usefixtures("aws_env")

TP = TopicPartition("skips", 0)
RECORDS = 40
PLANS = {TP: [SegmentPlan(records=RECORDS, max_timestamp_ms=WRITER_NOW_MS - 60_000 + i) for i in range(4)]}
#: The second segment, damaged on the broker's disk: offsets 40..79.
FIRST, LAST = RECORDS, 2 * RECORDS - 1


def _damaged_logs(logs: Path) -> None:
    write_scripted_log_dir(logs, PLANS)
    segment = logs / f"{TP.topic}-{TP.partition}" / f"{FIRST:020d}.log"
    with segment.open("r+b") as f:
        f.truncate(segment.stat().st_size - 7)  # the last batch ends mid-way


@pytest.fixture
def blocked(request: pytest.FixtureRequest, tmp_path: Path) -> Tier:
    """A tier whose copying stopped at the damaged segment: only the first segment is remote."""
    tier = make_tier("sqlite-fs", request, tmp_path, _damaged_logs, copy_errors=1)
    assert [(s.start_offset, s.end_offset) for s in tier.finished(TP)] == [(0, FIRST - 1)]
    return tier


def _rlm(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out if code == 0 or captured.out else captured.err


def test_a_skipped_segment_is_listed_by_verify_and_is_no_gap(
    spark: SparkSession, blocked: Tier, capsys: pytest.CaptureFixture[str]
) -> None:
    config = str(blocked.config)
    code, out = _rlm(capsys, "spark", "verify", "--config", config, "--quiet", "--json")
    assert (code, json.loads(out)["skipped_ranges"]) == (0, [])  # blocked is lag, not a hole

    reason = "segment lost with its disk"
    code, out = _rlm(
        capsys,
        *("copy", "skip", TP.topic, str(TP.partition), "--config", config),
        *("--from-offset", str(FIRST), "--to-offset", str(LAST), "--reason", reason),
    )
    assert code == 0, out
    code, out = _rlm(capsys, "copy", "--once", "--quiet", "--config", config)
    assert code == 0, out
    remote = [(s.start_offset, s.end_offset) for s in blocked.finished(TP)]
    assert remote[0] == (0, FIRST - 1) and remote[1][0] == LAST + 1  # copying went on above

    code, out = _rlm(capsys, "spark", "verify", "--config", config, "--quiet", "--json")
    report: dict[str, Any] = json.loads(out)
    assert (code, report["healthy"], report["problems"]) == (0, True, [])
    (listed,) = report["skipped_ranges"]
    assert {k: listed[k] for k in ("topic", "partition", "start_offset", "end_offset", "kind", "reason")} == {
        "topic": TP.topic,
        "partition": TP.partition,
        "start_offset": FIRST,
        "end_offset": LAST,
        "kind": "OPERATOR",
        "reason": reason,
    }
    code, out = _rlm(capsys, "spark", "verify", "--config", config, "--quiet")
    assert code == 0
    assert f"{TP.topic}-{TP.partition} offsets {FIRST}..{LAST} (OPERATOR): {reason}" in out
    assert "no problems found" in out
