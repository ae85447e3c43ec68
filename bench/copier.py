"""Benchmark of the copier; prints one JSON document.

A backlog of rolled segments (default: 4 partitions of 512 MiB, ``segment.bytes`` 128 MiB, values
partly text and partly random bytes, batches uncompressed or LZ4/zstd) is tiered

* to an S3 server over HTTP: moto's server, in a process of its own so that its CPU is not counted
  as rlm's; side by side, in the same run and against the same server, with boto3's plain
  ``upload_file`` of the same files (the baseline; target: at least 0.9x its MB/s);
* to the filesystem backend; side by side with ``shutil.copyfile`` of the same files (and with
  ``copyfile`` followed by ``fsync``, since the backend makes every object durable).

Each side runs ``--rounds`` times, alternating with its baseline; the best round of each counts.
Figures: MB/s (10^6 bytes of ``.log`` per second, wall clock) and CPU seconds per GB of this
process, all threads included (``time.process_time``); for S3 also the server's CPU per GB.
Metadata goes to a fresh SQLite file per round (the embedded default store). The data is
generated once into ``--data`` and reused.

Usage: ``python bench/copier.py [--gib 2] [--partitions 4] [--segment-mib 128] [--rounds 3]``
(or ``python -m bench.copier ...`` from the repository's root)
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import boto3

from rlm.config import Settings, TopicSettings
from rlm.log.checkpoints import new_topic_id, write_offset_checkpoint
from rlm.log.logdir import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    LogDir,
)
from rlm.log.model import Codec
from rlm.log.writer import PartitionAppender, ProducerRecord, TopicConfig
from rlm.metrics import Metrics
from rlm.storage.filesystem import FilesystemStorage
from rlm.storage.protocol import RemoteStorage
from rlm.storage.url import open_storage
from rlm.tiering.copier import Copier

MiB = 1024 * 1024
BASE_TS = 1_700_000_000_000
TOPIC = "bench"
REGION = "us-east-1"
_WORDS = b"order shipped payment accepted customer address street city country total amount".split()


# -- data -----------------------------------------------------------------------------------------


def _values(rng: random.Random, count: int) -> list[bytes]:
    """Record values of about 1 KiB: 60 % text (compressible), 40 % random bytes (not)."""
    out = []
    for _ in range(count):
        size = rng.randint(600, 1400)
        text = b" ".join(rng.choice(_WORDS) for _ in range(size // 7))[: size * 6 // 10]
        out.append(text + rng.randbytes(size - len(text)))
    return out


def _generate_partition(job: tuple[Path, int, int, int, str]) -> None:
    directory, segments, segment_bytes, seed, topic_id = job
    rng = random.Random(seed)
    now = [BASE_TS]
    appender = PartitionAppender(
        directory,
        TopicConfig(segment_bytes=segment_bytes),
        clock=lambda: now[0] + 10_000,
        leader_epoch=seed % 3,
        topic_id=topic_id,
    )
    values = _values(rng, 2048)
    codecs = (Codec.NONE, Codec.NONE, Codec.LZ4, Codec.ZSTD)
    bases: set[int] = set()
    while len(bases) <= segments:  # until the active segment is the (segments + 1)-th
        records = []
        for _ in range(rng.randint(50, 150)):
            now[0] += rng.randint(0, 3)
            key = f"customer-{rng.randint(0, 99_999)}".encode()
            records.append(ProducerRecord(now[0], key, rng.choice(values), (("source", b"bench"),)))
        bases.add(appender.append(records, codec=rng.choice(codecs)).segment_base_offset)
    appender.close()


def generate(data: Path, partitions: int, gib: float, segment_mib: int) -> float:
    """Write the log directory unless a complete one with these parameters exists; seconds taken."""
    logs = data / "logs"
    marker = data / "complete.json"
    params = {"partitions": partitions, "gib": gib, "segment_mib": segment_mib}
    if marker.exists() and json.loads(marker.read_text()) == params:
        return 0.0
    shutil.rmtree(logs, ignore_errors=True)
    logs.mkdir(parents=True)
    started = time.perf_counter()
    per_partition = max(1, round(gib * 1024 / partitions / segment_mib))
    topic_id = new_topic_id()
    jobs = [
        (logs / f"{TOPIC}-{p}", per_partition, segment_mib * MiB, p + 1, topic_id) for p in range(partitions)
    ]
    with mp.get_context("fork").Pool(min(partitions, os.cpu_count() or 1)) as pool:
        pool.map(_generate_partition, jobs)
    ends = {(TOPIC, p.partition): p.log_end_offset() for p in LogDir(logs).partitions()}
    write_offset_checkpoint(logs / REPLICATION_OFFSET_CHECKPOINT, ends)
    write_offset_checkpoint(logs / RECOVERY_POINT_CHECKPOINT, ends)
    write_offset_checkpoint(logs / LOG_START_OFFSET_CHECKPOINT, dict.fromkeys(ends, 0))
    marker.write_text(json.dumps(params))
    return time.perf_counter() - started


def rolled_logs(logs: Path) -> list[Path]:
    """The ``.log`` files the copier tiers: every rolled segment (the high watermark is at the end)."""
    return [s.log_path for p in LogDir(logs).partitions() for s in p.rolled_segments()]


def _warm(paths: list[Path]) -> None:
    for path in paths:
        with open(path, "rb") as f:
            while f.read(8 * MiB):
                pass


# -- measuring ------------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of process ``pid`` so far, all its threads (from ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _measure(run: Callable[[], None], total_bytes: int, server_pid: int | None = None) -> dict[str, float]:
    server_cpu = cpu_seconds(server_pid) if server_pid is not None else 0.0
    cpu = time.process_time()
    wall = time.perf_counter()
    run()
    wall = time.perf_counter() - wall
    cpu = time.process_time() - cpu
    figures = {
        "seconds": round(wall, 2),
        "mb_per_s": round(total_bytes / wall / 1e6, 1),
        "cpu_s_per_gb": round(cpu / (total_bytes / 1e9), 2),
    }
    if server_pid is not None:
        used = cpu_seconds(server_pid) - server_cpu
        figures["server_cpu_s_per_gb"] = round(used / (total_bytes / 1e9), 2)
    return figures


def _best(runs: list[dict[str, float]]) -> dict[str, float]:
    return max(runs, key=lambda r: r["mb_per_s"])


def _copy_with_rlm(logs: Path, storage: RemoteStorage, remote_url: str, work: Path, total: int) -> None:
    from metadata import SqlMetadataStore, upgrade

    url = f"sqlite:///{work / 'metadata.db'}"
    upgrade(url)
    store = SqlMetadataStore.open(url)
    settings = Settings(
        log_dirs=(logs,),
        broker_id=1,
        metadata_url=url,
        remote_url=remote_url,
        topic_defaults=TopicSettings(retention_ms=-1),
    )
    try:
        outcomes = Copier(settings, store, storage, Metrics()).run_once()
    finally:
        store.close()
    errors = [str(o.error) for o in outcomes if o.error is not None]
    copied = sum(o.copied_bytes for o in outcomes)
    if errors or copied != total:
        raise SystemExit(f"the copier failed: copied {copied} of {total} bytes; {errors}")


# -- S3 -------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_moto() -> tuple[subprocess.Popen[bytes], str]:
    """moto's S3 server in a process of its own on a free port; returns it and its endpoint."""
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise SystemExit("moto's server did not start")


def s3_session() -> boto3.session.Session:
    """A boto3 session with the benchmark's credentials (moto takes any)."""
    return boto3.session.Session(
        aws_access_key_id="bench-key", aws_secret_access_key="bench-secret", region_name=REGION
    )


def _empty(client: Any, bucket: str) -> None:
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if keys:
            client.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})


def _upload_files(client: Any, bucket: str, prefix: str, paths: list[Path]) -> None:
    for path in paths:
        client.upload_file(str(path), bucket, f"{prefix}/{path.parent.name}/{path.name}")


def bench_s3(logs: Path, paths: list[Path], total: int, rounds: int) -> dict[str, Any]:
    process, endpoint = start_moto()
    try:
        client = s3_session().client("s3", endpoint_url=endpoint)
        bucket = "rlm-bench"
        client.create_bucket(Bucket=bucket)
        ours: list[dict[str, float]] = []
        theirs: list[dict[str, float]] = []
        for number in range(rounds):
            upload = partial(_upload_files, client, bucket, f"plain-{number}", paths)
            theirs.append(_measure(upload, total, process.pid))
            _empty(client, bucket)
            with tempfile.TemporaryDirectory() as work:
                url = f"s3://{bucket}/rlm-{number}"
                storage = open_storage(url, endpoint_url=endpoint, region=REGION, session=s3_session())
                try:
                    copy = partial(_copy_with_rlm, logs, storage, url, Path(work), total)
                    ours.append(_measure(copy, total, process.pid))
                finally:
                    storage.close()
            _empty(client, bucket)
    finally:
        process.terminate()
        process.wait(30)
    best, baseline = _best(ours), _best(theirs)
    return {
        "server": "moto_server over HTTP on 127.0.0.1, in its own process",
        "rlm": best,
        "boto3_upload_file": baseline,
        "ratio": round(best["mb_per_s"] / baseline["mb_per_s"], 2),
        "target_ratio_min": 0.9,
        "rounds": {"rlm": ours, "boto3_upload_file": theirs},
    }


# -- filesystem -----------------------------------------------------------------------------------


def bench_filesystem(logs: Path, paths: list[Path], total: int, rounds: int, data: Path) -> dict[str, Any]:
    ours: list[dict[str, float]] = []
    plain: list[dict[str, float]] = []
    durable: list[dict[str, float]] = []
    for _ in range(rounds):
        for runs, sync in ((plain, False), (durable, True)):
            target = Path(tempfile.mkdtemp(dir=data))

            def copy_files(target: Path = target, sync: bool = sync) -> None:
                for path in paths:
                    out = target / f"{path.parent.name}-{path.name}"
                    shutil.copyfile(path, out)
                    if sync:
                        with open(out, "rb") as f:
                            os.fsync(f.fileno())

            runs.append(_measure(copy_files, total))
            shutil.rmtree(target)
        work = Path(tempfile.mkdtemp(dir=data))
        storage = FilesystemStorage(work / "remote")
        url = (work / "remote").as_uri()
        ours.append(_measure(partial(_copy_with_rlm, logs, storage, url, work, total), total))
        shutil.rmtree(work)
    best, baseline = _best(ours), _best(plain)
    return {
        "rlm": best,
        "shutil_copyfile": baseline,
        "shutil_copyfile_fsync": _best(durable),
        "ratio": round(best["mb_per_s"] / baseline["mb_per_s"], 2),
        "ratio_to_copyfile_fsync": round(best["mb_per_s"] / _best(durable)["mb_per_s"], 2),
        "rounds": {"rlm": ours, "shutil_copyfile": plain, "shutil_copyfile_fsync": durable},
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gib", type=float, default=2.0, help="backlog size over all partitions")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--segment-mib", type=int, default=128, help="segment.bytes")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each side; the best counts")
    parser.add_argument("--data", type=Path, default=Path("build/bench/copier"))
    parser.add_argument("--skip-s3", action="store_true")
    parser.add_argument("--skip-filesystem", action="store_true")
    args = parser.parse_args()
    # Run as a script, bench/ comes first on sys.path, where bench/metadata.py would hide the
    # metadata package.
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]

    args.data = args.data.resolve()
    args.data.mkdir(parents=True, exist_ok=True)
    generated = generate(args.data, args.partitions, args.gib, args.segment_mib)
    logs = args.data / "logs"
    paths = rolled_logs(logs)
    total = sum(p.stat().st_size for p in paths)
    _warm(paths)  # every side reads from the page cache
    result: dict[str, Any] = {
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "metadata": "SQLite (a fresh file per round)",
        "data": {
            "partitions": args.partitions,
            "segments": len(paths),
            "bytes": total,
            "segment_bytes": args.segment_mib * MiB,
            "generation_s": round(generated, 1),
        },
    }
    if not args.skip_s3:
        result["s3"] = bench_s3(logs, paths, total, args.rounds)
    if not args.skip_filesystem:
        result["filesystem"] = bench_filesystem(logs, paths, total, args.rounds, args.data)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
