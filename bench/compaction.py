"""Benchmark of ``rlm spark compact``; prints one JSON document.

A compacted topic (default: 1 GiB in all, 4 partitions, 100,000 keys, 10% tombstones, batches
uncompressed, gzip, snappy, LZ4 or zstd, ``segment.bytes`` 64 MiB) is written as a Kafka log
directory and tiered by the copier to a filesystem remote store with SQLite metadata. Then, each
in a process of its own (one JVM each), the job runs in dry-run mode (every stage: the keys read,
the winners picked, every output segment rebuilt from its inputs; nothing stored, so each run
sees the same input):

* ``local[2]`` against ``local[1]``: input MB/s (bytes of the ``.log`` objects compacted per
  second of the job). Target: at least 1.6 times (the job scales with cores).
* ``local[2]`` against the in-process reference compaction (every stage in one Python process):
  target at least 1.2 times.
* driver peak RSS (the Python driver process) with ``--few-keys`` (1,000) against ``--keys-many``
  (1,000,000, or as many as there are records) on a topic of the same size: target at most 1.2 times (keys
  never reach the driver).

Each figure records ``os.getloadavg()``: on a machine whose cores other work wants, the local[2]
figures lose most. Usage: ``python bench/compaction.py [--mib 1024] [--keys 100000] [--scaling-only]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MiB = 1024 * 1024
TOPIC = "users"
NOW = 1_700_000_000_000
#: Progress lines of the timed run (on stderr).
PROGRESS = False


def write_topic(logs: Path, *, mib: int, keys: int, partitions: int, segment_mib: int, seed: int = 1) -> int:
    """A compacted topic of about ``mib`` MiB; returns the records written."""
    from rlm.log.dirwriter import LogDirWriter
    from rlm.log.model import Codec
    from rlm.log.writer import ProducerRecord, TopicConfig

    rng = random.Random(seed)
    clock = [NOW]

    def tick() -> int:
        clock[0] += 1
        return clock[0]

    config = TopicConfig(segment_bytes=segment_mib * MiB)
    per_partition = mib * MiB // partitions
    records = 0
    payload = rng.randbytes(4096)
    with LogDirWriter(logs, clock=tick, default_config=config) as writer:
        for p in range(partitions):
            appender = writer.partition(TOPIC, p)
            written = 0
            where = (0, 0)  # (segment, position) of the last batch
            while written < per_partition:
                batch = []
                for _ in range(50):
                    key = b"key-%d" % rng.randrange(keys)
                    value = None if rng.random() < 0.1 else payload[: rng.randrange(60, 200)]
                    batch.append(ProducerRecord(clock[0], key, value))
                result = appender.append(batch, codec=rng.choice(list(Codec)))
                # bytes since the last batch began: a batch, or the rest of the segment it rolled
                same = result.segment_base_offset == where[0]
                written += result.position - where[1] if same else result.position
                where = (result.segment_base_offset, result.position)
                records += len(batch)
            appender.roll()
            appender.append([ProducerRecord(clock[0], b"tail", b"active")])
    return records


def tier(logs: Path, work: Path) -> dict[str, Any]:
    """Tier the topic; the settings (as a document) and the bytes of the tiered ``.log`` objects."""
    from prometheus_client import CollectorRegistry

    from metadata import SqlMetadataStore, upgrade
    from rlm.config import Settings
    from rlm.metrics import Metrics
    from rlm.storage.url import open_storage
    from rlm.tiering.copier import Copier

    url = f"sqlite:///{work / 'metadata.db'}"
    upgrade(url)
    remote = work / "remote"
    remote.mkdir()
    settings = Settings(log_dirs=(logs,), broker_id=1, metadata_url=url, remote_url=remote.as_uri())
    storage = open_storage(settings.remote_url)
    with SqlMetadataStore.open(url) as store:
        outcomes = Copier(settings, store, storage, Metrics(CollectorRegistry())).run_once()
    storage.close()
    return {
        "metadata.url": url,
        "remote.url": settings.remote_url,
        "log.dirs": [str(logs)],
        "broker.id": 1,
        "input_bytes": sum(o.copied_bytes for o in outcomes),
    }


def child(config: dict[str, Any], engine: str) -> dict[str, Any]:
    """Run one dry-run compaction (in this process) and time it."""
    from metadata import SqlMetadataStore
    from rlm.config import Settings, TopicSettings
    from rlm.pipeline.compact.engine import InProcessEngine
    from rlm.pipeline.compact.job import CompactOptions, compact
    from rlm.pipeline.storage import StorageSpec
    from rlm.storage.url import open_storage

    settings = Settings(
        metadata_url=config["metadata.url"],
        remote_url=config["remote.url"],
        topic_overrides={TOPIC: TopicSettings(cleanup_policy="compact", segment_bytes=64 * MiB)},
    )
    spec = StorageSpec.from_settings(settings)
    storage = open_storage(settings.remote_url)
    with SqlMetadataStore.open(settings.metadata_url) as store:
        if engine == "reference":
            started = time.monotonic()
            report = compact(
                store, storage, spec, InProcessEngine(spec), settings, CompactOptions(dry_run=True)
            )
            seconds = time.monotonic() - started
        else:
            from rlm.pipeline.spark.compact import SparkEngine
            from rlm.pipeline.spark.session import SparkOptions, build_session

            session = build_session(SparkOptions(master=engine, conf=(("spark.ui.enabled", "false"),)))
            # a first run warms the executors' Python workers: a cost of the session, not the job
            compact(
                store,
                storage,
                spec,
                SparkEngine(session, spec, progress=False),
                settings,
                CompactOptions(dry_run=True, partitions=(0,)),
            )
            started = time.monotonic()
            report = compact(
                store,
                storage,
                spec,
                SparkEngine(session, spec, progress=PROGRESS),
                settings,
                CompactOptions(dry_run=True),
            )
            seconds = time.monotonic() - started
            session.stop()
    removed = sum(p.counts.records_in - p.counts.records_out for p in report.partitions)
    return {
        "seconds": round(seconds, 3),
        "records_removed": removed,
        "driver_peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def run_child(config: dict[str, Any], engine: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", engine, "--config-json", json.dumps(config)],
        check=False,
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        raise SystemExit(f"the {engine} run failed:\n{out.stderr}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    result["load_average"] = [round(x, 2) for x in os.getloadavg()]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=1024, help="size of the topic (MiB)")
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--few-keys", type=int, default=1_000)
    parser.add_argument("--keys-many", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--segment-mib", type=int, default=64, help="segment.bytes of the topic (MiB)")
    parser.add_argument("--scaling-only", action="store_true", help="only local[2] against local[1]")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--config-json", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    if args.child:
        print(json.dumps(child(json.loads(args.config_json), args.child)))
        return
    result: dict[str, Any] = {
        "mib": args.mib,
        "partitions": args.partitions,
        "segment_mib": args.segment_mib,
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }
    with tempfile.TemporaryDirectory(prefix="rlm-bench-compaction-") as tmp:
        work = Path(tmp)
        records = write_topic(
            work / "logs",
            mib=args.mib,
            keys=args.keys,
            partitions=args.partitions,
            segment_mib=args.segment_mib,
        )
        config = tier(work / "logs", work / "main")
        mb = config["input_bytes"] / 1e6
        result.update(records=records, keys=args.keys, input_mb=round(mb, 1))
        engines = ("local[2]", "local[1]") if args.scaling_only else ("local[2]", "local[1]", "reference")
        runs = {engine: run_child(config, engine) for engine in engines}
        for figures in runs.values():
            figures["input_mb_per_s"] = round(mb / figures["seconds"], 2)
        result["runs"] = runs
        result["local2_vs_local1"] = round(
            runs["local[2]"]["input_mb_per_s"] / runs["local[1]"]["input_mb_per_s"], 2
        )
        if args.scaling_only:
            result["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
            print(json.dumps(result, indent=2))
            return
        result["local2_vs_reference"] = round(
            runs["local[2]"]["input_mb_per_s"] / runs["reference"]["input_mb_per_s"], 2
        )
        rss = {}
        for label, keys in (("few_keys", args.few_keys), ("many_keys", min(args.keys_many, records))):
            directory = work / label
            directory.mkdir()
            write_topic(
                directory / "logs",
                mib=args.mib,
                keys=keys,
                partitions=args.partitions,
                segment_mib=args.segment_mib,
                seed=2,
            )
            rss[label] = {"keys": keys, **run_child(tier(directory / "logs", directory), "local[2]")}
        result["driver_rss"] = rss
        result["many_vs_few_keys_rss"] = round(
            rss["many_keys"]["driver_peak_rss_mib"] / rss["few_keys"]["driver_peak_rss_mib"], 2
        )
    result["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
