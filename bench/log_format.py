"""Benchmark of the log-format layer; prints one JSON document.

Figures, each side by side with kafka-python's reader in the same run:
- find-offset-by-timestamp on a >= 1 GiB partition of several segments (warm page cache):
  rlm's index-driven lookup vs a scan of the partition with kafka-python (batch by batch, skipping
  batches whose max timestamp is below the target, decoding the batch that matches);
- record decode throughput (records/s), uncompressed and zstd;
- batch-header scan throughput (GB/s) without decoding records;
- peak RSS while scanning one segment and the whole partition (it must not grow with the data).

And against aiokafka's C reader (``aiokafka.record._crecords``), on logs of ``--produced-records``
records written by ``rlm.log.produce`` (one with every codec, transactions and headers; one
uncompressed), every batch CRC-checked by both sides, rounds alternating, best round each:
- ``decode_objects``: records/s decoded into objects (rlm's ``decode_batch`` -> ``Record``s);
  target >= 1.0x aiokafka;
- ``decode_arrow``: records/s decoded into Arrow arrays (``rlm.log.columns.append_log`` +
  ``rlm.log.arrow``, 8192 rows an Arrow batch, as the pipeline's records stage) against
  aiokafka's reader producing Python objects; target >= 3x.

Each is given in wall time and in CPU time (``ratio_cpu``, steadier on a shared host). With
compressed batches, ``decompression`` gives the CPU time of the decompression alone, each payload
by the fastest library call for its codec (``arrow_ratio_ceiling``: the Arrow ratio no decoder
could pass with those libraries), and which library each side uses.

``--check`` also builds the C decoder with AddressSanitizer and runs a fuzz of mutated batches
through it (``bench/decode_check.py``); the script exits non-zero when that fails.

Usage: ``python bench/log_format.py [--gib 1.0] [--queries 200] [--data build/bench/log_format]
[--check] [--only-c-decode]``
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import resource
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: import bench.decode_check from the checkout
    sys.path.insert(0, str(ROOT))

from bench.decode_check import run_check  # noqa: E402
from rlm.log.arrow import record_arrays  # noqa: E402
from rlm.log.batches import decode_batch, parse_header  # noqa: E402
from rlm.log.byte_source import FileSource, iter_headers  # noqa: E402
from rlm.log.columns import ColumnBuffers, append_log  # noqa: E402
from rlm.log.logdir import PartitionDir  # noqa: E402
from rlm.log.model import Codec  # noqa: E402
from rlm.log.produce import ProduceSpec, produce  # noqa: E402
from rlm.log.writer import PartitionAppender, ProducerRecord, TopicConfig  # noqa: E402

BASE_TS = 1_700_000_000_000
MiB = 1024 * 1024


def _generate(directory: Path, total_bytes: int, codec: Codec, segment_bytes: int, seed: int) -> None:
    marker = directory / ".complete"
    if marker.exists():
        return
    if directory.exists():
        for f in directory.iterdir():
            f.unlink()
    rng = random.Random(seed)
    now = [BASE_TS]
    appender = PartitionAppender(
        directory, TopicConfig(segment_bytes=segment_bytes), clock=lambda: now[0] + 10_000
    )
    words = b"lorem ipsum dolor sit amet consectetur adipiscing elit sed do".split()
    values = [b" ".join(rng.choice(words) for _ in range(rng.randint(20, 80))) for _ in range(512)]
    written = 0
    batches = 0
    while written < total_bytes:
        records = []
        for _ in range(rng.randint(50, 150)):
            now[0] += rng.randint(0, 3)
            ts = now[0] - (rng.randint(0, 2000) if rng.random() < 0.1 else 0)
            key = f"k{rng.randint(0, 9999)}".encode()
            records.append(ProducerRecord(ts, key, rng.choice(values), (("h", b"v"),)))
        appender.append(records, codec=codec)
        batches += 1
        if batches % 100 == 0:
            written = sum(f.stat().st_size for f in directory.glob("*.log"))
    appender.close()
    marker.touch()


def _kafka_python_find(partition: PartitionDir, target: int) -> tuple[int, int] | None:
    from kafka.record import MemoryRecords

    for segment in partition.segments():
        records = MemoryRecords(segment.log_path.read_bytes())
        while records.has_next():
            batch = records.next_batch()
            if batch.max_timestamp < target:
                continue
            for record in batch:
                if record.timestamp >= target:
                    return record.timestamp, record.offset
    return None


def _bench_find(partition: PartitionDir, queries: int, baseline_queries: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    segments = partition.segments()
    lo = BASE_TS
    hi = max(s.max_timestamp_and_offset().timestamp for s in segments)
    targets = [rng.randint(lo, hi) for _ in range(queries)]
    for t in targets[:5]:  # warm caches: page cache, loaded indexes
        partition.find_offset_by_timestamp(t)
    ours = []
    answers = {}
    for t in targets:
        start = time.perf_counter()
        found = partition.find_offset_by_timestamp(t)
        ours.append(time.perf_counter() - start)
        answers[t] = found
    theirs = []
    for t in targets[:baseline_queries]:
        start = time.perf_counter()
        found_kp = _kafka_python_find(partition, t)
        theirs.append(time.perf_counter() - start)
        mine = answers[t]
        if found_kp is None or mine is None or (mine.timestamp, mine.offset) != found_kp:
            raise SystemExit(f"answers differ for {t}: rlm {mine}, kafka-python {found_kp}")
    ours_median = statistics.median(ours)
    theirs_median = statistics.median(theirs)
    return {
        "queries": queries,
        "baseline_queries": baseline_queries,
        "rlm_median_ms": round(ours_median * 1000, 4),
        "rlm_p99_ms": round(sorted(ours)[int(len(ours) * 0.99) - 1] * 1000, 4),
        "kafka_python_scan_median_ms": round(theirs_median * 1000, 2),
        "speedup": round(theirs_median / ours_median, 1),
        "targets": {"speedup_min": 100, "median_ms_max": 2.0},
    }


def _decode_ours(paths: list[Path]) -> int:
    count = 0
    for path in paths:
        data = path.read_bytes()
        with FileSource(path) as source:
            for header in iter_headers(source):
                count += len(decode_batch(data, header, verify_crc=True))
    return count


def _decode_kafka_python(paths: list[Path]) -> int:
    from kafka.record import MemoryRecords

    count = 0
    for path in paths:
        records = MemoryRecords(path.read_bytes())
        while records.has_next():
            batch = records.next_batch()
            batch.validate_crc()
            for r in batch:
                _ = (r.offset, r.timestamp, r.key, r.value, r.headers)
                count += 1
    return count


def _bench_decode(paths: list[Path]) -> dict[str, Any]:
    _decode_ours(paths[:1])
    start = time.perf_counter()
    n_ours = _decode_ours(paths)
    ours = time.perf_counter() - start
    start = time.perf_counter()
    n_theirs = _decode_kafka_python(paths)
    theirs = time.perf_counter() - start
    if n_ours != n_theirs:
        raise SystemExit(f"record counts differ: rlm {n_ours}, kafka-python {n_theirs}")
    return {
        "records": n_ours,
        "rlm_records_per_s": round(n_ours / ours),
        "kafka_python_records_per_s": round(n_theirs / theirs),
        "ratio": round(theirs / ours, 2),
        "target_ratio_min": 1.5,
    }


def _produced(directory: Path, records: int, codecs: tuple[Codec, ...], seed: int) -> list[bytes]:
    """The ``.log`` files of one partition written by ``rlm.log.produce`` (generated once)."""
    marker = directory / ".complete"
    if not marker.exists():
        spec = ProduceSpec(
            topics=1, partitions=1, records=records, segment_bytes=256 * MiB, codecs=codecs, seed=seed
        )
        produce(directory, spec)
        marker.touch()
    return [path.read_bytes() for path in sorted(directory.glob("*/*.log"))]


def _rlm_objects(logs: list[bytes]) -> int:
    count = 0
    for data in logs:
        pos, end = 0, len(data)
        while pos < end:
            header = parse_header(data, pos)
            count += len(decode_batch(data, header, verify_crc=True))
            pos = header.end_position
    return count


def _rlm_arrow(logs: list[bytes]) -> int:
    count = 0
    for data in logs:
        pos, end = 0, len(data)
        while pos < end:  # an Arrow batch of the records of whole batches, once 8192 rows are in
            cols, positions = ColumnBuffers(), bytearray()
            pos = append_log(
                cols, data, pos, first_offset=0, last_offset=2**63 - 1, max_rows=8192, positions=positions
            ).position
            count += len(record_arrays(cols).offset)
    return count


def _aiokafka_objects(logs: list[bytes]) -> int:
    from aiokafka.record.memory_records import MemoryRecords

    count = 0
    for data in logs:
        records = MemoryRecords(data)
        while (batch := records.next_batch()) is not None:
            batch.validate_crc()
            for r in batch:
                _ = (r.offset, r.timestamp, r.key, r.value, r.headers)
                count += 1
    return count


def _payloads(logs: list[bytes]) -> list[tuple[int, memoryview]]:
    """(codec, payload) of every compressed v2 batch."""
    found = []
    for data in logs:
        pos = 0
        while pos < len(data):
            header = parse_header(data, pos)
            if header.magic == 2 and header.attributes & 0x07:
                found.append((header.attributes & 0x07, memoryview(data)[pos + 61 : header.end_position]))
            pos = header.end_position
    return found


def _library_floor(payloads: list[tuple[int, memoryview]]) -> Callable[[list[bytes]], int]:
    """Only the decompression, each payload by the fastest library call in the environment for its
    codec, nothing checked beyond what the library checks: no decoder can take less time."""
    import cramjam
    import lz4.frame
    import zstandard
    from isal import isal_zlib

    zstd = zstandard.ZstdDecompressor()
    out = memoryview(bytearray(1 << 20))

    def snappy(view: memoryview) -> None:
        pos = 16  # xerial framing: a header, then (int32 BE length, raw block)
        while pos < len(view):
            length = int.from_bytes(view[pos : pos + 4], "big")
            block = view[pos + 4 : pos + 4 + length]
            # into a buffer: faster than decompress_raw, which makes a buffer per block
            cramjam.snappy.decompress_raw_into(block, out[: cramjam.snappy.decompress_raw_len(block)])
            pos += 4 + length

    calls: dict[int, Callable[[memoryview], object]] = {
        1: lambda view: isal_zlib.decompress(view, 31),
        2: snappy,
        3: lz4.frame.decompress,
        4: zstd.decompress,
    }

    def run(_: list[bytes]) -> int:
        for codec, view in payloads:
            calls[codec](view)
        return 0

    return run


_LIBRARIES = {
    "rlm": "gzip: isal (ISA-L); snappy: cramjam (into a buffer); lz4: lz4.frame; zstd: zstandard",
    "aiokafka": "gzip: gzip (zlib); snappy, lz4, zstd: cramjam",
}


def _bench_c_decode(logs: list[bytes], rounds: int) -> dict[str, Any]:
    from aiokafka.record import _crecords  # noqa: F401 - the baseline is aiokafka's C reader

    sides: dict[str, Callable[[list[bytes]], int]] = {
        "rlm_objects": _rlm_objects,
        "rlm_arrow": _rlm_arrow,
        "aiokafka_objects": _aiokafka_objects,
        "decompress_floor": _library_floor(payloads := _payloads(logs)),
    }
    best = dict.fromkeys(sides, float("inf"))
    cpu = dict.fromkeys(sides, float("inf"))  # CPU seconds: steadier than wall time on a busy host
    counts = {}
    for _ in range(rounds):
        for name, run in sides.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            counts[name] = run(logs)
            best[name] = min(best[name], time.perf_counter() - start)
            cpu[name] = min(cpu[name], time.process_time() - start_cpu)
    del counts["decompress_floor"]
    if len(set(counts.values())) != 1:
        raise SystemExit(f"record counts differ: {counts}")
    records = counts["aiokafka_objects"]
    rate = {name: round(records / seconds) for name, seconds in best.items()}
    figures: dict[str, Any] = {
        "records": records,
        "log_bytes": sum(len(d) for d in logs),
        "rounds": rounds,
        "decode_objects": {
            "rlm_records_per_s": rate["rlm_objects"],
            "aiokafka_c_records_per_s": rate["aiokafka_objects"],
            "ratio": round(best["aiokafka_objects"] / best["rlm_objects"], 2),
            "ratio_cpu": round(cpu["aiokafka_objects"] / cpu["rlm_objects"], 2),
            "target_ratio_min": 1.0,
        },
        "decode_arrow": {
            "rlm_arrow_records_per_s": rate["rlm_arrow"],
            "aiokafka_c_objects_records_per_s": rate["aiokafka_objects"],
            "ratio": round(best["aiokafka_objects"] / best["rlm_arrow"], 2),
            "ratio_cpu": round(cpu["aiokafka_objects"] / cpu["rlm_arrow"], 2),
            "target_ratio_min": 3.0,
        },
    }
    if payloads:  # the bound decompression alone puts on the Arrow ratio
        figures["decompression"] = {
            "library_floor_cpu_ms": round(cpu["decompress_floor"] * 1000, 2),
            "rlm_arrow_cpu_ms": round(cpu["rlm_arrow"] * 1000, 2),
            "aiokafka_cpu_ms": round(cpu["aiokafka_objects"] * 1000, 2),
            "arrow_ratio_ceiling": round(cpu["aiokafka_objects"] / cpu["decompress_floor"], 2),
            "libraries": _LIBRARIES,
        }
    figures["loadavg"] = [round(x, 2) for x in os.getloadavg()]
    return figures


def _c_decode_figures(args: argparse.Namespace) -> dict[str, Any]:
    mixed = _produced(args.data / "produced-mixed", args.produced_records, tuple(Codec), args.seed)
    plain = _produced(args.data / "produced-none", args.produced_records, (Codec.NONE,), args.seed)
    return {
        "c_decode_mixed_codecs": _bench_c_decode(mixed, args.rounds),
        "c_decode_uncompressed": _bench_c_decode(plain, args.rounds),
    }


def _peak_rss_kib() -> int:
    # VmHWM, unlike ru_maxrss, starts afresh in a spawned process (ru_maxrss survives exec).
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _scan_headers(paths: list[str]) -> tuple[int, int, float, int]:
    batches = 0
    total = 0
    start = time.perf_counter()
    for path in paths:
        with FileSource(path) as source:
            for header in iter_headers(source):
                batches += 1
                total += header.size
    elapsed = time.perf_counter() - start
    return batches, total, elapsed, _peak_rss_kib()


def _scan_in_child(paths: list[str]) -> tuple[int, int, float, int]:
    ctx = mp.get_context("spawn")
    with ctx.Pool(1) as pool:
        return pool.apply(_scan_headers, (paths,))


def _baseline_rss(paths: list[str]) -> int:
    from kafka.record import MemoryRecords

    for path in paths:
        records = MemoryRecords(Path(path).read_bytes())
        while records.has_next():
            records.next_batch()
    return _peak_rss_kib()


def _bench_scan(partition: PartitionDir) -> dict[str, Any]:
    paths = [str(s.log_path) for s in partition.segments()]
    _scan_headers(paths)  # warm the page cache
    batches, total, elapsed, rss_all = _scan_in_child(paths)
    _, one_total, _, rss_one = _scan_in_child(paths[:1])
    ctx = mp.get_context("spawn")
    with ctx.Pool(1) as pool:
        kp_rss_one = pool.apply(_baseline_rss, (paths[:1],))
    return {
        "batches": batches,
        "bytes": total,
        "gb_per_s": round(total / elapsed / 1e9, 2),
        "peak_rss_mib_one_segment": round(rss_one / 1024, 1),
        "peak_rss_mib_all_segments": round(rss_all / 1024, 1),
        "one_segment_mib": round(one_total / MiB, 1),
        "all_segments_mib": round(total / MiB, 1),
        "kafka_python_peak_rss_mib_one_segment": round(kp_rss_one / 1024, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gib", type=float, default=1.0, help="size of the big partition")
    parser.add_argument("--zstd-mib", type=int, default=64)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--baseline-queries", type=int, default=5)
    parser.add_argument("--decode-mib", type=int, default=64, help="uncompressed data decoded")
    parser.add_argument("--data", type=Path, default=Path("build/bench/log_format"))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--produced-records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the aiokafka comparison")
    parser.add_argument("--check", action="store_true", help="also fuzz the C decoder under ASan")
    parser.add_argument("--check-cases", type=int, default=20_000)
    parser.add_argument("--only-c-decode", action="store_true", help="only the aiokafka comparison")
    args = parser.parse_args()
    if args.only_c_decode:
        _print_and_check({"python": sys.version.split()[0], **_c_decode_figures(args)}, args)
        return

    big = args.data / "bench-0"
    zstd = args.data / "benchz-0"
    t0 = time.perf_counter()
    _generate(big, int(args.gib * 1024 * MiB), Codec.NONE, 128 * MiB, args.seed)
    _generate(zstd, args.zstd_mib * MiB, Codec.ZSTD, 32 * MiB, args.seed + 1)
    generated = time.perf_counter() - t0
    partition = PartitionDir(big)
    partition_bytes = sum(s.size() for s in partition.segments())
    decode_paths = []
    acc = 0
    for s in partition.segments():
        if acc >= args.decode_mib * MiB:
            break
        decode_paths.append(s.log_path)
        acc += s.size()
    # Decode a bounded slice of a segment so the kafka-python baseline finishes in reasonable time.
    slice_path = args.data / "decode-slice.log"
    if not slice_path.exists():
        with FileSource(decode_paths[0]) as source:
            end = 0
            for header in iter_headers(source):
                if header.end_position > args.decode_mib * MiB:
                    break
                end = header.end_position
            slice_path.write_bytes(source.read(0, end))
    result = {
        "python": sys.version.split()[0],
        "partition_bytes": partition_bytes,
        "segments": len(partition.segments()),
        "data_generation_s": round(generated, 1),
        "find_offset_by_timestamp": _bench_find(partition, args.queries, args.baseline_queries, args.seed),
        "decode_uncompressed": _bench_decode([slice_path]),
        "decode_zstd": _bench_decode([s.log_path for s in PartitionDir(zstd).segments()]),
        "header_scan": _bench_scan(partition),
        **_c_decode_figures(args),
    }
    _print_and_check(result, args)


def _print_and_check(result: dict[str, Any], args: argparse.Namespace) -> None:
    result["loadavg"] = [round(x, 2) for x in os.getloadavg()]
    if args.check:
        result["asan_fuzz"] = run_check(args.check_cases, args.seed)
    print(json.dumps(result, indent=2))
    if args.check and not result["asan_fuzz"]["ok"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
