"""``rlm spark export`` to Parquet end to end: the command line, Spark local[2], each backend pair.

Every exported row must equal kafka-python's decoding of the tiered ``.log`` objects (a decoder
independent of rlm's), read back with pyarrow and with DuckDB; ``read_committed`` leaves out
exactly the aborted records and those from the first of a transaction whose marker is not tiered
on; ``--from``/``--to`` select what a brute-force search of the oracle selects; incremental runs
add only what earlier runs did not write.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from pyspark.sql import SparkSession

from rlm.cli import main
from rlm.pipeline.export.files import LocalFiles
from tests.pipeline.export_support import (
    Row,
    exported,
    oracle_rows,
    read_duckdb,
    read_pyarrow,
    stable_ends,
)
from tests.pipeline.killed_export import POINTS
from tests.pipeline.shared_jvm import gateway_env
from tests.pipeline.tiers import Tier

pytestmark = pytest.mark.usefixtures("aws_env")


def export(
    capsys: pytest.CaptureFixture[str], tier: Tier, output: Path, *args: str
) -> tuple[int, dict[str, Any]]:
    code = main(
        ["spark", "export", "--config", str(tier.config), "--quiet", "--json", "--output", str(output), *args]
    )
    captured = capsys.readouterr()
    return code, json.loads(captured.out) if code == 0 else {"error": captured.err}


def first_at_least(rows: list[Row], timestamp: int) -> dict[tuple[str, int], int]:
    """Per partition, the first offset whose record timestamp is ≥ ``timestamp``, by brute force."""
    found: dict[tuple[str, int], int] = {}
    for row in rows:
        tp = (row["topic"], row["partition"])
        if tp not in found and row["timestamp"] is not None and row["timestamp"] >= timestamp:
            found[tp] = row["offset"]
    return found


def test_every_row_is_kafka_pythons_read_back_with_pyarrow_duckdb_and_pandas(
    spark: SparkSession, healthy_tier: Tier, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    oracle = oracle_rows(healthy_tier)
    code, report = export(capsys, healthy_tier, tmp_path / "out")
    assert code == 0, report
    expected = exported(oracle)
    assert report["rows"] == len(expected) > 1000
    assert read_pyarrow(tmp_path / "out") == expected
    assert read_duckdb(tmp_path / "out") == expected
    frame = pd.read_parquet(tmp_path / "out")
    assert len(frame) == len(expected)
    assert str(frame["timestamp"].dtype) == "datetime64[ms, UTC]"
    layout = {p.relative_to(tmp_path / "out").parts[:3] for p in (tmp_path / "out").rglob("*.parquet")}
    assert {parts[0] for parts in layout} == {f"topic={t}" for t in {r["topic"] for r in expected}}
    assert all(parts[1].startswith("partition=") and parts[2].startswith("date=") for parts in layout)
    assert not (tmp_path / "out" / "_rlm_staging").exists() or not any(
        (tmp_path / "out" / "_rlm_staging").iterdir()
    )


@pytest.mark.parametrize("healthy_tier", ["sqlite-fs"], indirect=True)
def test_read_committed_drops_the_aborted_records_and_stops_at_the_stable_offset(
    spark: SparkSession, healthy_tier: Tier, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    oracle = oracle_rows(healthy_tier)
    code, _ = export(capsys, healthy_tier, tmp_path / "all", "--isolation", "read_uncommitted")
    assert code == 0
    everything = read_pyarrow(tmp_path / "all")
    assert everything == exported(oracle, committed=False)
    data = [r for r in oracle if not r["is_control"]]
    aborted = {(r["topic"], r["partition"], r["offset"]) for r in data if r["aborted"]}
    # The records of transactions whose marker is not tiered yet, and every record after them.
    unstable = {(r["topic"], r["partition"], r["offset"]) for r in data if r["unstable"]}
    assert aborted and unstable
    code, _ = export(capsys, healthy_tier, tmp_path / "committed")
    committed = read_pyarrow(tmp_path / "committed")
    left_out = aborted | unstable
    assert [r for r in everything if (r["topic"], r["partition"], r["offset"]) not in left_out] == committed
    assert len(everything) - len(committed) == len(left_out)


def test_from_and_to_select_what_a_brute_force_search_selects(
    spark: SparkSession, healthy_tier: Tier, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    oracle = oracle_rows(healthy_tier)
    stamps = sorted(r["timestamp"] for r in oracle if r["timestamp"] is not None)
    low, high = stamps[len(stamps) // 4], stamps[3 * len(stamps) // 4]
    code, report = export(capsys, healthy_tier, tmp_path / "out", "--from", str(low), "--to", str(high))
    assert code == 0, report
    starts, stops = first_at_least(oracle, low), first_at_least(oracle, high)
    big = 2**63
    expected = exported(
        [
            r
            for r in oracle
            if starts.get((r["topic"], r["partition"]), big)
            <= r["offset"]
            < stops.get((r["topic"], r["partition"]), big)
        ]
    )
    assert 0 < len(expected) < len(exported(oracle))
    assert read_pyarrow(tmp_path / "out") == expected
    # The ranges found are the brute-force ones: rlm's lookups, not a filter of what was read
    # (each stop no later than the partition's tiered last stable offset).
    ends = stable_ends(oracle)
    for part in report["partitions"]:
        tp = (part["topic"], part["partition"])
        assert part["start_offset"] == starts.get(tp)
        stop = min(stops.get(tp, big), ends.get(tp, big))
        assert part["stop_offset"] == (None if stop == big else stop)


@pytest.mark.parametrize("healthy_tier", ["sqlite-fs"], indirect=True)
def test_incremental_runs_add_only_new_records(
    spark: SparkSession, healthy_tier: Tier, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    oracle = oracle_rows(healthy_tier)
    stamps = sorted(r["timestamp"] for r in oracle if r["timestamp"] is not None)
    middle = stamps[len(stamps) // 2]
    out = tmp_path / "out"
    code, first = export(capsys, healthy_tier, out, "--incremental", "--to", str(middle))
    assert code == 0, first
    after_first = read_pyarrow(out)
    assert 0 < len(after_first) < len(exported(oracle))
    code, second = export(capsys, healthy_tier, out, "--incremental")
    assert code == 0, second
    assert read_pyarrow(out) == exported(oracle)  # the rest, nothing twice
    assert first["rows"] + second["rows"] == len(exported(oracle))
    code, third = export(capsys, healthy_tier, out, "--incremental")
    assert (code, third["rows"], third["files"]) == (0, 0, 0)
    assert read_pyarrow(out) == exported(oracle)
    code, refused = export(capsys, healthy_tier, out)
    assert code == 1 and "holds an export already" in refused["error"] and "--incremental" in refused["error"]
    with LocalFiles().exclusive(str(out)) as held:  # another run of the output
        assert held
        code, busy = export(capsys, healthy_tier, out, "--incremental")
    assert code == 1 and "another export to" in busy["error"] and "is running" in busy["error"]
    assert read_pyarrow(out) == exported(oracle)


@dataclass(frozen=True)
class KilledRun:
    """An export in a process of its own (its driver: its Spark work runs on the session's JVM),
    killed at ``point``."""

    process: subprocess.Popen[bytes]
    output: Path
    stderr: Path

    def wait_killed(self) -> None:
        code = self.process.wait(timeout=300)
        assert code == -signal.SIGKILL, self.stderr.read_text(errors="replace")[-3000:]


def _start_killed_run(
    spark: SparkSession, tier: Tier, directory: Path, point: str, *, incremental: bool
) -> KilledRun:
    """Start the export of ``tier`` into ``directory / "out"`` on ``spark``'s JVM, to be killed at
    ``point``."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), **gateway_env(spark)}
    output, stderr = directory / "out", directory / "stderr"
    command = [
        sys.executable,
        "-m",
        "tests.pipeline.killed_export",
        point,
        "--config",
        str(tier.config),
        "--quiet",
        *(["--incremental"] if incremental else []),
        "--output",
        str(output),
    ]
    with stderr.open("wb") as err:
        process = subprocess.Popen(
            command, env=env, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True
        )
    return KilledRun(process, output, stderr)


#: The test that reruns a killed run without ``--incremental``.
PLAIN_RERUN = "test_a_plain_rerun_after_a_kill_mid_move_completes_the_commit_and_says_so"


@pytest.fixture(scope="module", autouse=True)
def killed_runs(
    request: pytest.FixtureRequest,
    healthy_tiers: Callable[[str, pytest.FixtureRequest], Tier],
    tmp_path_factory: pytest.TempPathFactory,
    spark: SparkSession,
) -> Iterator[dict[tuple[str, bool], KilledRun]]:
    """The killed runs of the module's selected tests, by ``(point, incremental)``, all started at
    once on the sqlite-fs healthy tier (each into an output of its own) when the module starts:
    they run beside the tests before theirs. At the end, any run still going is killed."""
    wanted = []
    for item in request.session.items:
        if getattr(item, "module", None) is not sys.modules[__name__]:
            continue
        params = (
            item.callspec.params if isinstance(item, pytest.Function) and hasattr(item, "callspec") else {}
        )
        if item.name.startswith(PLAIN_RERUN):
            wanted.append(("mid-move", False))
        elif "point" in params:
            wanted.append((str(params["point"]), True))
    runs: dict[tuple[str, bool], KilledRun] = {}
    try:
        for point, incremental in wanted:
            tier = healthy_tiers("sqlite-fs", request)
            directory = tmp_path_factory.mktemp(f"killed-{point}-{'incremental' if incremental else 'plain'}")
            runs[point, incremental] = _start_killed_run(
                spark, tier, directory, point, incremental=incremental
            )
        yield runs
    finally:
        for run in runs.values():
            if run.process.poll() is None:
                os.killpg(run.process.pid, signal.SIGKILL)
                run.process.wait(timeout=60)


@pytest.mark.slow
@pytest.mark.parametrize("healthy_tier", ["sqlite-fs"], indirect=True)
@pytest.mark.parametrize("point", POINTS)
def test_a_killed_run_leaves_no_partial_rows_and_the_rerun_is_complete(
    spark: SparkSession,
    healthy_tier: Tier,
    killed_runs: dict[tuple[str, bool], KilledRun],
    capsys: pytest.CaptureFixture[str],
    point: str,
) -> None:
    expected = exported(oracle_rows(healthy_tier))
    run = killed_runs[point, True]
    run.wait_killed()
    out = run.output
    staging = out / "_rlm_staging"
    manifests = list(staging.glob("*.commit.json"))
    committed = point not in ("before-commit", "mid-manifest")
    visible = read_pyarrow(out)
    if not committed:
        # The rows were written, to staging only: none is visible, and the rerun starts over.
        assert list(staging.rglob("*.parquet")) and not manifests
        assert visible == [] and not list(out.glob("topic=*"))
        assert bool(list(staging.glob(".*.commit.json.tmp"))) == (point == "mid-manifest")
    else:
        # Committed: the manifest names the files; whatever is visible is the run's, once.
        assert len(manifests) == 1
        names = json.loads(manifests[0].read_text())["files"]
        assert len(names) >= 4  # the kill mid-move lands between the first and the last move
        keys = [(row["topic"], row["partition"], row["offset"]) for row in visible]
        assert len(set(keys)) == len(keys)
        assert all(row in expected for row in visible)
        assert (0 < len(visible) < len(expected)) if point == "mid-move" else visible == expected
    code, report = export(capsys, healthy_tier, out, "--incremental")
    assert code == 0, report
    if committed:
        # The rerun rolled the commit forward (its moves, then the ledger) and found nothing new.
        assert (report["discarded_runs"], len(report["completed_runs"]), report["rows"]) == ([], 1, 0)
    else:
        assert (len(report["discarded_runs"]), report["completed_runs"]) == (1, [])
        assert report["rows"] == len(expected)
    assert read_pyarrow(out) == expected  # every row, once
    assert read_duckdb(out) == expected
    assert not list(staging.iterdir())
    code, again = export(capsys, healthy_tier, out, "--incremental")
    assert (code, again["rows"], again["completed_runs"]) == (0, 0, [])
    assert read_pyarrow(out) == expected


@pytest.mark.slow
@pytest.mark.parametrize("healthy_tier", ["sqlite-fs"], indirect=True)
def test_a_plain_rerun_after_a_kill_mid_move_completes_the_commit_and_says_so(
    spark: SparkSession,
    healthy_tier: Tier,
    killed_runs: dict[tuple[str, bool], KilledRun],
    capsys: pytest.CaptureFixture[str],
) -> None:
    expected = exported(oracle_rows(healthy_tier))
    run = killed_runs["mid-move", False]
    run.wait_killed()
    out = run.output
    code, refused = export(capsys, healthy_tier, out)
    assert code == 1 and "killed before it ended, was completed now" in refused["error"], refused
    assert read_pyarrow(out) == expected
