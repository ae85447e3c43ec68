"""Benchmark of the Spark pipelines over a tiered topic; prints one JSON document.

A backlog (default: 4 partitions, 1 GiB in all, ``segment.bytes`` 128 MiB, values partly text and
partly random bytes, batches uncompressed or LZ4/zstd; the copier benchmark's generator) is tiered
by the copier to an S3 server over HTTP (moto's server, in a process of its own) with SQLite
metadata, then each figure is measured on it, alternating with its baseline, ``--rounds`` times;
the best round of each side counts.

* ``verify_deep``: ``rlm spark verify --deep`` on ``local[2]`` (every byte of every ``.log``
  object read by executors, CRCs, offsets, the index files rebuilt and compared), MB/s of objects
  read, against reading the same objects with boto3 and nothing else (``get_object``, the body
  read in 8 MiB pieces and dropped) with 2 threads, as many as the executors' slots; and with 1
  thread. Target: at least 0.5 times the 2-thread baseline. The Spark session is started, and a
  first verify run warms its executors (Python workers, storage clients), before the clock: they
  are costs of a session, not of a job.

* ``export``: ``rlm spark export`` (Parquet, partitioned by topic, partition and date, staged then
  committed) on ``local[2]`` and on ``local[1]``, MB/s of ``.log`` objects exported, against a
  one-process export of the same segments with kafka-python and pyarrow (each ``.log`` object
  read with boto3, decoded by kafka-python's ``MemoryRecords``, control batches left out, the
  rows written with ``pyarrow.parquet.write_to_dataset`` with the same partitioning). Targets:
  local[2] at least 1.6 times local[1], and 1.5 times the one-process export. Each Spark side
  runs in a session of its own master, started and warmed by a first export before the clock.
  The output is a local directory, which rlm's executors write with pyarrow (an ``s3a://``
  output would be written by Spark's Parquet writer, not measured here); each side's output is
  deleted after its clock stops.

Figures go in :data:`FIGURES`, each a function of the shared :class:`Tier`.

moto serves every request from one Python process sharing the machine's cores with the readers;
both sides pay for that, the ratio of the same run is what carries over. CPU seconds per GB are
given for each side (this process with Spark's JVM and Python workers; the server apart): on a
machine whose cores other work also wants, the side that needs more CPU per GB loses more.

Usage: ``python bench/pipeline.py [--gib 1] [--partitions 4] [--segment-mib 128] [--rounds 3]
[--figures verify_deep,export]``
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

MiB = 1024 * 1024
BUCKET = "rlm-bench"
READ_PIECE = 8 * MiB


@dataclass
class Tier:
    """The tiered backlog every figure reads."""

    settings: Any
    """rlm's :class:`~rlm.config.Settings` naming the store and the bucket."""
    endpoint: str
    server_pid: int
    keys: list[str]
    """Every object of the finished segments (``.log`` and index objects)."""
    bytes: int
    log_bytes: int
    session: Any
    """The SparkSession (local[2])."""


def _tier(logs: Path, work: Path, endpoint: str) -> tuple[Any, list[str], int, int]:
    from bench.copier import REGION, s3_session
    from metadata import SqlMetadataStore, upgrade
    from rlm.config import Settings, TopicSettings
    from rlm.metastore.model import SegmentState
    from rlm.metrics import Metrics
    from rlm.storage.url import open_storage
    from rlm.tiering.copier import Copier

    url = f"sqlite:///{work / 'metadata.db'}"
    upgrade(url)
    settings = Settings(
        log_dirs=(logs,),
        broker_id=1,
        metadata_url=url,
        remote_url=f"s3://{BUCKET}/tier",
        s3_endpoint_url=endpoint,
        topic_defaults=TopicSettings(retention_ms=-1),
    )
    storage = open_storage(settings.remote_url, endpoint_url=endpoint, region=REGION, session=s3_session())
    store = SqlMetadataStore.open(url)
    try:
        outcomes = Copier(settings, store, storage, Metrics()).run_once()
        errors = [str(o.error) for o in outcomes if o.error is not None]
        if errors:
            raise SystemExit(f"the copier failed: {errors}")
        finished = [
            s
            for record in store.list_partitions()
            for s in store.list_segments(record.topic_partition, states=[SegmentState.COPY_SEGMENT_FINISHED])
        ]
    finally:
        store.close()
        storage.close()
    keys = [k for s in finished for k in (s.layout.log_key, s.layout.index_key)]
    index_bytes = sum(r.size for s in finished for _, r in s.layout.index_ranges)
    log_bytes = sum(s.size_bytes for s in finished)
    return settings, keys, log_bytes + index_bytes, log_bytes


# -- measuring ------------------------------------------------------------------------------------


def _own_cpu_seconds(server_pid: int) -> float:
    """CPU seconds so far of this process and every process it started (Spark's JVM, its Python
    workers), the S3 server's excepted."""
    from bench.copier import cpu_seconds

    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue  # gone meanwhile
        parents[int(stat.parent.name)] = int(fields[1])
    mine = {os.getpid()}
    grew = True
    while grew:
        found = {pid for pid, parent in parents.items() if parent in mine and pid != server_pid} - mine
        grew = bool(found)
        mine |= found
    total = 0.0
    for pid in mine:
        try:
            total += cpu_seconds(pid)
        except OSError:
            continue
    return total


def _measure(run: Callable[[], int], server_pid: int) -> dict[str, float]:
    """Run once; MB/s of the bytes ``run`` says it read, wall clock; CPU per GB of the reading side
    (this process and the processes it started) and of the server."""
    from bench.copier import cpu_seconds

    server = cpu_seconds(server_pid)
    own = _own_cpu_seconds(server_pid)
    wall = time.perf_counter()
    read = run()
    wall = time.perf_counter() - wall
    gb = read / 1e9
    return {
        "seconds": round(wall, 2),
        "bytes": read,
        "mb_per_s": round(read / wall / 1e6, 1),
        "cpu_s_per_gb": round((_own_cpu_seconds(server_pid) - own) / gb, 2),
        "server_cpu_s_per_gb": round((cpu_seconds(server_pid) - server) / gb, 2),
    }


def _best(runs: list[dict[str, float]]) -> dict[str, float]:
    return max(runs, key=lambda r: r["mb_per_s"])


def _boto3_read(tier: Tier, threads: int) -> int:
    """Read every object with plain boto3 ``get_object`` calls on ``threads`` threads."""
    from bench.copier import s3_session

    client = s3_session().client("s3", endpoint_url=tier.endpoint)

    def read(key: str) -> int:
        body = client.get_object(Bucket=BUCKET, Key=f"tier/{key}")["Body"]
        total = 0
        while piece := body.read(READ_PIECE):
            total += len(piece)
        return total

    with ThreadPoolExecutor(max_workers=threads) as pool:
        return sum(pool.map(read, tier.keys))


def _verify_deep(tier: Tier) -> int:
    from rlm.pipeline.spark.jobs import run_verify
    from rlm.pipeline.spark.session import SparkOptions
    from rlm.pipeline.verify.job import VerifyOptions

    report = run_verify(tier.settings, SparkOptions(), VerifyOptions(deep=True), progress=False)
    if not report.healthy:
        raise SystemExit(f"verify found problems in the benchmark's tier: {report.problems[:3]}")
    return report.bytes_read


def verify_deep(tier: Tier, rounds: int) -> dict[str, Any]:
    """``verify --deep`` on local[2] against plain boto3 reads of the same objects."""
    ours: list[dict[str, float]] = []
    two: list[dict[str, float]] = []
    one: list[dict[str, float]] = []
    _verify_deep(tier)  # executors start their Python workers and open storage once per session
    for _ in range(rounds):
        two.append(_measure(partial(_boto3_read, tier, 2), tier.server_pid))
        ours.append(_measure(partial(_verify_deep, tier), tier.server_pid))
        one.append(_measure(partial(_boto3_read, tier, 1), tier.server_pid))
    best, baseline = _best(ours), _best(two)
    return {
        "rlm_spark_verify_deep_local2": best,
        "boto3_get_object_2_threads": baseline,
        "boto3_get_object_1_thread": _best(one),
        "ratio": round(best["mb_per_s"] / baseline["mb_per_s"], 2),
        "target_ratio_min": 0.5,
        "rounds": {"rlm": ours, "boto3_2_threads": two, "boto3_1_thread": one},
    }


# -- export ---------------------------------------------------------------------------------------


def _rlm_export(tier: Tier, output: Path) -> int:
    """``rlm spark export`` to a new ``output`` in the active session; the ``.log`` bytes exported."""
    from rlm.pipeline.export.job import ExportOptions
    from rlm.pipeline.spark.jobs import run_export
    from rlm.pipeline.spark.session import SparkOptions

    report = run_export(tier.settings, SparkOptions(), ExportOptions(output=str(output)), progress=False)
    if report.rows == 0:
        raise SystemExit("the export wrote no row")
    return tier.log_bytes


def _one_process_export(tier: Tier, output: Path) -> int:
    """The baseline: every ``.log`` object read with boto3, decoded with kafka-python, written with
    pyarrow, one segment after another in this process."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from kafka.record import MemoryRecords

    from bench.copier import s3_session
    from rlm.pipeline.export.rows import EXPORT_SCHEMA, PARTITION_COLUMNS
    from rlm.storage.layout import LOG_SUFFIX, parse_segment_key

    client = s3_session().client("s3", endpoint_url=tier.endpoint)
    types = {0: "CreateTime", 1: "LogAppendTime"}
    for key in (k for k in tier.keys if k.endswith(LOG_SUFFIX)):
        parsed = parse_segment_key(key)
        assert parsed is not None
        data = client.get_object(Bucket=BUCKET, Key=f"tier/{key}")["Body"].read()
        memory = MemoryRecords(data)
        rows: dict[str, list[Any]] = {name: [] for name in EXPORT_SCHEMA.names}
        while (batch := memory.next_batch()) is not None:
            v2 = batch.magic >= 2
            if v2 and batch.is_control_batch:
                continue
            for record in batch:
                rows["offset"].append(record.offset)
                rows["timestamp"].append(record.timestamp if batch.magic > 0 else None)
                rows["timestamp_type"].append(
                    types[batch.timestamp_type] if batch.magic > 0 else "NoTimestampType"
                )
                rows["key"].append(record.key)
                rows["value"].append(record.value)
                rows["headers"].append([{"key": k, "value": v} for k, v in record.headers] if v2 else [])
                rows["leader_epoch"].append(batch.leader_epoch if v2 and batch.leader_epoch >= 0 else None)
                rows["producer_id"].append(batch.producer_id if v2 and batch.producer_id >= 0 else None)
        count = len(rows["offset"])
        rows["topic"] = [parsed.topic] * count
        rows["partition"] = [parsed.partition] * count
        stamps = pa.array(rows["timestamp"], pa.timestamp("ms", tz="UTC"))
        rows["date"] = pc.cast(stamps, pa.date32()).to_pylist()
        table = pa.Table.from_pydict(rows, schema=EXPORT_SCHEMA)
        pq.write_to_dataset(table, output, partition_cols=list(PARTITION_COLUMNS))
    return tier.log_bytes


def _measure_export(export: Callable[[Tier, Path], int], tier: Tier, output: Path) -> dict[str, float]:
    """:func:`_measure` of one export to ``output``, which is deleted after the clock stops
    (deleting a gigabyte of files takes half a second, and is no part of an export)."""
    import shutil

    try:
        return _measure(partial(export, tier, output), tier.server_pid)
    finally:
        shutil.rmtree(output, ignore_errors=True)


def _use_session(tier: Tier, master: str) -> None:
    """Stop the tier's session and start one of ``master`` in its place."""
    from rlm.pipeline.spark.session import SparkOptions, build_session

    tier.session.stop()
    tier.session = build_session(SparkOptions(master=master, conf=(("spark.ui.enabled", "false"),)))


def export(tier: Tier, rounds: int) -> dict[str, Any]:
    """``rlm spark export`` on local[2] and local[1] against a one-process kafka-python + pyarrow export."""
    work = Path(
        tempfile.mkdtemp(prefix="export-", dir=Path(tier.settings.metadata_url[len("sqlite:///") :]).parent)
    )
    outputs = (work / f"out-{n}" for n in range(10_000))
    sides: dict[str, list[dict[str, float]]] = {"local2": [], "local1": [], "baseline": []}
    for master, side in (("local[1]", "local1"), ("local[2]", "local2")):
        _use_session(tier, master)
        _measure_export(_rlm_export, tier, next(outputs))  # warm: Python workers, storage clients
        for _ in range(rounds):
            sides["baseline"].append(_measure_export(_one_process_export, tier, next(outputs)))
            sides[side].append(_measure_export(_rlm_export, tier, next(outputs)))
    two, one, baseline = _best(sides["local2"]), _best(sides["local1"]), _best(sides["baseline"])
    return {
        "rlm_spark_export_local2": two,
        "rlm_spark_export_local1": one,
        "kafka_python_pyarrow_one_process": baseline,
        "ratio_local2_to_local1": round(two["mb_per_s"] / one["mb_per_s"], 2),
        "target_ratio_local2_to_local1_min": 1.6,
        "ratio_local2_to_one_process": round(two["mb_per_s"] / baseline["mb_per_s"], 2),
        "target_ratio_local2_to_one_process_min": 1.5,
        "rounds": sides,
    }


#: Every figure of this benchmark: name → function of the tier and the number of rounds.
FIGURES: dict[str, Callable[[Tier, int], dict[str, Any]]] = {"verify_deep": verify_deep, "export": export}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gib", type=float, default=1.0, help="backlog size over all partitions")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--segment-mib", type=int, default=128, help="segment.bytes")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each side; the best counts")
    parser.add_argument("--data", type=Path, default=Path("build/bench/pipeline"))
    parser.add_argument("--figures", default=",".join(FIGURES), help="comma-separated figures to measure")
    args = parser.parse_args()
    # Run as a script, bench/ comes first on sys.path, where bench/metadata.py would hide the
    # metadata package.
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    sys.path.insert(0, str(here.parent))

    from bench.copier import generate, s3_session, start_moto
    from rlm.pipeline.spark.session import SparkOptions, build_session

    unknown = set(args.figures.split(",")) - set(FIGURES)
    if unknown:
        raise SystemExit(f"unknown figures: {', '.join(sorted(unknown))} (known: {', '.join(FIGURES)})")
    args.data = args.data.resolve()
    args.data.mkdir(parents=True, exist_ok=True)
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    generated = generate(args.data, args.partitions, args.gib, args.segment_mib)
    # Executors (Python workers the JVM starts) read S3 credentials from the environment.
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench-key", AWS_SECRET_ACCESS_KEY="bench-secret", AWS_DEFAULT_REGION="us-east-1"
    )
    process, endpoint = start_moto()
    try:
        s3_session().client("s3", endpoint_url=endpoint).create_bucket(Bucket=BUCKET)
        with tempfile.TemporaryDirectory(dir=args.data) as work:
            tiering = time.perf_counter()
            settings, keys, total, log_bytes = _tier(args.data / "logs", Path(work), endpoint)
            tiering = time.perf_counter() - tiering
            session = build_session(SparkOptions(master="local[2]", conf=(("spark.ui.enabled", "false"),)))
            tier = Tier(settings, endpoint, process.pid, keys, total, log_bytes, session)
            try:
                figures = {name: FIGURES[name](tier, args.rounds) for name in args.figures.split(",")}
            finally:
                tier.session.stop()
    finally:
        process.terminate()
        process.wait(30)
    result: dict[str, Any] = {
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "load_average_at_start": load_at_start,
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "server": "moto_server over HTTP on 127.0.0.1, in its own process",
        "metadata": "SQLite",
        "data": {
            "partitions": args.partitions,
            "segments": len(keys) // 2,
            "log_bytes": log_bytes,
            "object_bytes": total,
            "segment_bytes": args.segment_mib * MiB,
            "generation_s": round(generated, 1),
            "tiering_s": round(tiering, 1),
        },
        **figures,
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
