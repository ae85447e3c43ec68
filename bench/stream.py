"""Benchmark of range streams (``rlm serve`` over an S3 server); prints one JSON document.

A generated partition is tiered to moto's S3 server (its own process) by ``rlm serve`` itself,
then its tiered segments are deleted locally, so that the range streamed is read from S3 only.
Side by side, in the same run:

* raw stream MB/s (``Accept: application/octet-stream``) vs a bare aiobotocore GET of each of
  the same ``.log`` objects, read whole front to back (target: ≥ 0.8x), interleaved;
* NDJSON and Arrow records/s vs rlm's own decode of the same batches in one process
  (:func:`rlm.log.batches.decode_batch`; targets ≥ 0.5x and ≥ 0.8x), over the broker's files
  (``local``, before they are deleted) and over S3 (``remote``, bounded by the S3 server: the
  records/s its bare GETs' MB/s allow are given, ``records_per_s_at_s3_ceiling``); the
  decode is timed between the streams, and the server's CPU seconds per record (all its threads)
  are given beside the decode's, which a shared machine's load changes less than wall figures;
* the ceiling the HTTP hop itself sets: a bare endpoint (uvicorn as ``rlm serve`` runs it, a
  streamed body of constant pieces, nothing read or encoded) to the same client, in MB/s, and the
  records/s it allows each medium at the bytes a record takes in it (``http_ceiling``);
* the ceiling the machine's cores set (``cpu_ceiling``), which the server and the client share:
  the CPU a record takes at least, as the sum of the in-process encoding's (decode included) and,
  at the bytes the record takes in the medium, of what the bare endpoint's server and its client
  spend per byte, and the records/s the cores allow at that, counted at the work they do at once
  (``parallel_speedup``: the encoding in as many processes as cores, against one alone). It
  leaves out what a stream spends besides (its file or S3 reads, the event loop's steps, the
  threads' hand-offs, and over S3 the S3 server's own share of the same cores), so that no
  stream runs faster: a target above it is beyond this machine;
* 64 concurrent raw streams to slow readers: the server's threads (target: ≤ its configured pools
  + 8) and resident memory (target: ≤ 64 x ``remote.fetch.stream.buffer.bytes`` + 200 MiB).

The client runs on the same machine: it keeps each piece of a body as it arrives and joins
nothing inside the time, so that it takes as little as it can of the cores it measures.

moto reads a whole object for each ranged GET, so that chunked reads pay more than one GET per
object there: the raw ratio is a floor for real S3. Every figure comes with ``os.getloadavg()``.
Each timed figure is the median of :data:`REPEATS` runs after an untimed warm-up run (the
server's first Arrow stream imports pyarrow); the runs are given too (``runs_s``). This process's
garbage collector is off while a figure is timed, as ``timeit`` has it (:func:`collector_off`).
A ratio is the median of each round's own ratio (a stream over the decode, or the bare GETs, timed
next to it in the same round): the speed of a shared virtual machine drifts by half from one
minute to the next, more than a change measures, and a round's two figures see the same machine.
The ratio of the medians is given beside it (``ratio_of_medians``).

The range is of 160,000 records in segments of 8 MiB by default (about 33 MB over four remote
objects, uncompressed values a little more): long enough that records/s measure a stream's
throughput, not its start (a request's planning, first read and first encoding take 4-14 ms, a
tenth of a 40,000-record stream), and each remote object is read in more than one chunk, as real
segments (of hundreds of MiB) are. ``--records 40000 --segment-mib 2`` gives the figures of the
earlier, shorter workload.

The records are uncompressed, of 1000-byte values, by default: the stream's own work per byte is
then least and the HTTP hop weighs most. ``--codecs`` (e.g. ``lz4,zstd,snappy,gzip``, one per batch
in turn, as producers mix them) and ``--value-bytes`` measure other workloads; the document says
which one it measured (``workload``).

``--s3-server s3rver`` serves the remote tier from s3rver (``make s3rver``: Node.js, file-backed,
a ranged GET reads only its range) instead of moto, a second S3 server's ceiling beside moto's.

Usage: ``python bench/stream.py [--records 160000] [--segment-mib 8] [--codecs none] [--value-bytes 1000]
[--s3-server moto]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import itertools
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: import rlm from the checkout
    sys.path.insert(0, str(ROOT))

from bench.api import READ_TOKEN, TOPIC, free_port, http_get, start_rlm, stop, tiered_partition, wait_for  # noqa: E402
from rlm.cli.heap import keep_freed_blocks  # noqa: E402
from rlm.cli.serve import LOOP_THREADS  # noqa: E402
from rlm.log.batches import decode_batch  # noqa: E402
from rlm.log.byte_source import BytesSource, iter_headers  # noqa: E402
from rlm.log.model import BatchHeader, Codec  # noqa: E402
from rlm.log.produce import ProduceSpec, produce  # noqa: E402
from rlm.stream.service import DEFAULT_IO_THREADS  # noqa: E402

T = TypeVar("T")
BUCKET = "bench"
AUTH = {"Authorization": f"Bearer {READ_TOKEN}"}
OCTET = "application/octet-stream"
STREAMS = 64
BUFFER_BYTES = 4 * 1024 * 1024
MIB = 1024 * 1024
#: Where ``make s3rver`` installs s3rver (``--s3-server s3rver``).
S3RVER_BIN = ROOT / "build" / "s3rver" / "node_modules" / ".bin" / "s3rver"
#: Pieces of the bare endpoint's body (those of ``rlm serve``'s streams are 256-512 KiB).
CEILING_PIECE_BYTES = 512 * 1024
#: Cores the server and the client share (and, remote, the S3 server): :func:`encodings`' ``cpu_ceiling``.
CORES = os.cpu_count() or 1
#: Timed runs of each figure (after one untimed run that warms imports and caches): the median.
REPEATS = 5


def figure(values: dict[str, Any]) -> dict[str, Any]:
    return {**values, "loadavg": [round(x, 2) for x in os.getloadavg()]}


def start_s3rver(directory: Path) -> tuple[subprocess.Popen[bytes], str]:
    """s3rver (``make s3rver``: Node.js, file-backed, ranged GETs read from the file) on a free
    port, keeping its objects in ``directory``."""
    if not S3RVER_BIN.exists():
        raise SystemExit(f"s3rver is not installed at {S3RVER_BIN}: `make s3rver` installs it")
    port = free_port()
    env = {**os.environ, "NODE_OPTIONS": "--openssl-legacy-provider"}
    command = [str(S3RVER_BIN), "--directory", str(directory), "--address", "127.0.0.1"]
    process = subprocess.Popen(
        [*command, "--port", str(port), "--silent", "--no-vhost-buckets"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    endpoint = f"http://127.0.0.1:{port}"

    def up() -> bool:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True

    wait_for(up, "s3rver", process, 30)
    return process, endpoint


def start_moto() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"

    def up() -> bool:
        import urllib.request

        with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2):
            return True

    wait_for(up, "moto server", process, 30)
    return process, endpoint


def run_bare_server(port: int, size: int, piece: int) -> None:
    """The ceiling's endpoint: ``GET /bytes`` streams ``size`` bytes in pieces of ``piece``, made
    once, with Starlette's ``StreamingResponse`` under uvicorn on uvloop, as ``rlm serve`` sends."""
    import uvicorn
    import uvloop
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, StreamingResponse
    from starlette.routing import Route

    block = b"x" * piece

    async def body() -> Any:
        for _ in range(size // piece):
            yield block
        yield block[: size % piece]

    async def stream(request: Request) -> StreamingResponse:
        return StreamingResponse(body(), media_type="application/octet-stream")

    async def ready(request: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    app = Starlette(routes=[Route("/bytes", stream), Route("/ready", ready)])
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, access_log=False)
    uvloop.run(uvicorn.Server(config).serve())


@contextlib.contextmanager
def bare_server(size: int, piece: int) -> Iterator[tuple[str, int]]:
    """The URL of a bare endpoint (:func:`run_bare_server`) in a process of its own, while open,
    and the process's id."""
    port = free_port()
    script = str(Path(__file__).resolve())
    process = subprocess.Popen([sys.executable, script, "--bare-server", str(port), str(size), str(piece)])
    url = f"http://127.0.0.1:{port}/bytes"
    try:
        wait_for(lambda: http_get(url.replace("/bytes", "/ready"))[0] == 200, "bare server", process, 30)
        yield url, process.pid
    finally:
        process.terminate()
        process.wait(30)


def thread_names(pid: int) -> dict[str, int]:
    """The process's threads by name (``/proc/<pid>/task/*/comm``; Python's own show as python)."""
    names: dict[str, int] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
        except OSError:  # the thread ended while listed
            continue
        names[name] = names.get(name, 0) + 1
    return dict(sorted(names.items()))


def median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def proc_status(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("Threads", "VmRSS"):
            fields[name] = int(value.split()[0])
    return fields


def drop_tiered_locally(log_dir: Path, highest_tiered: int) -> None:
    """Delete the broker's segments wholly tiered (as local retention would), keeping the rest."""
    partition = log_dir / f"{TOPIC}-0"
    bases = sorted(int(p.stem) for p in partition.glob("*.log"))
    for base, following in itertools.pairwise(bases):
        if following - 1 <= highest_tiered:
            for suffix in (".log", ".index", ".timeindex", ".txnindex"):
                (partition / f"{base:020d}{suffix}").unlink(missing_ok=True)


class Streamed:
    """A streamed body's size and the seconds it took, and its pieces as received when kept.

    Its ``repr`` is short: asyncio formats the result of a finished task when it reprs it, and the
    repr of tens of megabytes of bytes costs the client half a second of CPU between timed runs."""

    __slots__ = ("cpu_seconds", "pieces", "seconds", "size")

    def __init__(self, pieces: list[bytes], size: int, seconds: float, cpu_seconds: float) -> None:
        self.pieces = pieces
        self.size = size
        self.seconds = seconds
        self.cpu_seconds = cpu_seconds
        """The client's: this process's CPU seconds while the body was read."""

    def body(self) -> bytes:
        return b"".join(self.pieces)

    def __repr__(self) -> str:
        return f"Streamed({self.size} bytes in {self.seconds:.3f} s)"


async def timed_stream(url: str, media: str, params: dict[str, str], *, keep: bool = False) -> Streamed:
    """The body at ``url``, timed from the request to its last byte, its pieces kept (``keep``)
    or only counted. The pieces are taken as they arrive (``iter_any``: no re-joining into larger
    pieces, nothing joined inside the time), so that the client, on the same machine, takes as
    little of the time measured as it can. Timed runs keep nothing: a client holding every run's
    body grows its heap by hundreds of megabytes a round, and the pages it touches first (zeroed
    by the kernel, on a new virtual machine first backed by the host) took it more CPU than
    receiving the body, on whichever stream reached them."""
    import aiohttp

    started, cpu = time.perf_counter(), time.process_time()
    pieces = []
    size = 0
    async with (
        aiohttp.ClientSession() as session,
        session.get(url, params=params, headers={**AUTH, "Accept": media}) as answer,
    ):
        assert answer.status == 200, await answer.text()
        async for piece in answer.content.iter_any():
            size += len(piece)
            if keep:
                pieces.append(piece)
    return Streamed(pieces, size, time.perf_counter() - started, time.process_time() - cpu)


async def bare_gets(endpoint: str, keys: list[str]) -> tuple[int, float]:
    from aiobotocore.session import get_session

    total = 0
    started = time.perf_counter()
    async with get_session().create_client("s3", endpoint_url=endpoint, region_name="us-east-1") as client:
        for key in keys:
            answer = await client.get_object(Bucket=BUCKET, Key=key)
            async with answer["Body"] as body:
                while chunk := await body.read(1 << 20):
                    total += len(chunk)
    return total, time.perf_counter() - started


@contextlib.contextmanager
def collector_off() -> Iterator[None]:
    """This process's garbage collector off while a figure is timed, after a collection (as
    ``timeit`` times): a full collection of the client's heap took 160-200 ms, more than half of
    one stream, and fell on whichever stream was running."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def timed(run: Coroutine[Any, Any, T]) -> T:
    """``run`` to its end, timed by itself, with :func:`collector_off`."""
    with collector_off():
        return asyncio.run(run)


def decode_once(raw: bytes, headers: list[BatchHeader]) -> tuple[int, float, float]:
    """Records of rlm's own decoder over the batches of ``raw`` (``headers``), and the wall and
    CPU seconds it took (:func:`collector_off`)."""
    with collector_off():
        started, cpu = time.perf_counter(), time.process_time()
        records = sum(len(decode_batch(raw, h)) for h in headers)
        return records, time.perf_counter() - started, time.process_time() - cpu


def parallel_speedup(work: Callable[[], object], rounds: int = 4) -> float:
    """How much more of ``work`` the machine's cores do at once than one does alone: ``work``
    (``rounds`` times) in one process, then in :data:`CORES` processes at once (forked, started
    together), their wall seconds compared; :data:`CORES` where each core is a core of its own.
    The median of three trials. A virtual machine's cores may share a physical core or its memory:
    here the stream's encodings ran 1.55 to 1.92 times as fast on two as on one, the decode into
    Python records 1.8 to 2.2 times."""
    import multiprocessing

    context = multiprocessing.get_context("fork")

    def run(start: Any, seconds: Any) -> None:
        start.wait()
        began = time.perf_counter()
        for _ in range(rounds):
            work()
        seconds.put(time.perf_counter() - began)

    def slowest(processes: int) -> float:
        start, seconds = context.Event(), context.Queue()
        workers = [context.Process(target=run, args=(start, seconds)) for _ in range(processes)]
        for worker in workers:
            worker.start()
        start.set()
        took: list[float] = [seconds.get(timeout=600) for _ in workers]
        for worker in workers:
            worker.join()
        return max(took)

    return median([CORES * slowest(1) / slowest(CORES) for _ in range(3)])


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of process ``pid`` so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def encode_rate(raw: bytes, name: str) -> tuple[float, float, float]:
    """Records/s of the stream's own encoder of ``name`` (ndjson, arrow) over ``raw``, in one
    process, grouped as the server groups them: what the encoding costs without the HTTP hop; and
    the CPU seconds it takes a record (the median run's); and how much more of it the machine's
    cores do at once than one (:func:`parallel_speedup`). The batches are views of ``raw``, as a
    stream's are of the chunks it reads. A timed run keeps no piece it makes, as a stream sends
    and drops them: a run keeping them all touches new pages for each (it took 1.0 µs of CPU per
    NDJSON record, against 0.38). The records encoded are counted in an untimed run that keeps
    them."""
    # The C heap as rlm serve keeps it (rlm.cli.heap): a first NDJSON run without it took 3 times
    # the CPU, glibc mapping fresh pages for every piece (as it does above its first threshold).
    keep_freed_blocks()
    import pyarrow as pa

    from rlm.metastore.model import TopicPartition
    from rlm.stream.arrow import END_OF_STREAM, RECORDS_PER_MESSAGE, SCHEMA_MESSAGE, MessageWriter, message
    from rlm.stream.chunks import StreamBatch
    from rlm.stream.ndjson import ndjson_lines
    from rlm.stream.plan import RangePlan

    view = memoryview(raw)
    headers = list(iter_headers(BytesSource(raw), 0))
    batches = [StreamBatch(h, view[h.position : h.position + h.size], "local", "bench") for h in headers]
    plan = RangePlan(TopicPartition(TOPIC, 0), 0, 2**62, 2**62, None, None)
    from api.rest.stream import PIECE_BYTES

    if name == "ndjson":
        group_bytes, most = PIECE_BYTES, 1 << 62
    else:  # as RecordStreams.group_bytes has it
        group_bytes, most = BUFFER_BYTES // 2 // DEFAULT_IO_THREADS, RECORDS_PER_MESSAGE
    groups: list[list[StreamBatch]] = [[]]
    held = count = 0
    for batch in batches:
        groups[-1].append(batch)
        held += len(batch.data)
        count += batch.header.record_count
        if held >= group_bytes or count >= most:
            groups.append([])
            held = count = 0

    def encode(kept: list[bytes | memoryview] | None) -> tuple[float, float]:
        writer = MessageWriter()
        started, cpu = time.perf_counter(), time.process_time()
        for group in groups:
            if name == "ndjson":
                piece = ndjson_lines(plan, group)
                if kept is not None:
                    kept.append(piece)
            else:
                parts = writer.parts(message(plan, group))
                if kept is not None:
                    kept += [bytes(part) for part in parts]
        return time.perf_counter() - started, time.process_time() - cpu

    kept: list[bytes | memoryview] = []
    encode(kept)
    body = b"".join(kept)
    del kept
    if name == "ndjson":
        records = body.count(b"\n")
    else:
        records = pa.ipc.open_stream(SCHEMA_MESSAGE + body + END_OF_STREAM).read_all().num_rows
    del body
    seconds, cpu_seconds = sorted(encode(None) for _ in range(REPEATS))[REPEATS // 2]
    return records / seconds, cpu_seconds / records, parallel_speedup(lambda: encode(None))


async def concurrent_slow_streams(url: str, params: dict[str, str], pid: int) -> dict[str, Any]:
    import aiohttp

    peak = {"Threads": 0, "VmRSS": 0}
    before = proc_status(pid)
    idle = before["Threads"]
    names: dict[str, int] = {}
    done = asyncio.Event()

    async def sample() -> None:
        nonlocal names
        while not done.is_set():
            for name, value in proc_status(pid).items():
                if name == "Threads" and value > peak[name]:
                    names = thread_names(pid)
                peak[name] = max(peak[name], value)
            await asyncio.sleep(0.02)

    async def slow(session: aiohttp.ClientSession) -> int:
        got = 0
        async with session.get(
            url, params=params, headers={**AUTH, "Accept": "application/octet-stream"}
        ) as answer:
            assert answer.status == 200, await answer.text()
            async for piece in answer.content.iter_chunked(256 * 1024):
                got += len(piece)
                await asyncio.sleep(0.01)
        return got

    sampler = asyncio.create_task(sample())
    connector = aiohttp.TCPConnector(limit=STREAMS + 8)
    async with aiohttp.ClientSession(connector=connector) as session:
        got = await asyncio.gather(*(slow(session) for _ in range(STREAMS)))
    done.set()
    await sampler
    return {
        "streams": STREAMS,
        "bytes_each": got[0],
        "threads_idle": idle,
        "threads_max": peak["Threads"],
        "threads_at_max_by_name": names,
        "rss_max_mib": peak["VmRSS"] // 1024,
        # What the server held before the streams (its heap keeps what earlier streams freed):
        # the rest of the peak is the streams'.
        "rss_before_mib": before["VmRSS"] // 1024,
        "rss_per_stream_mib": round((peak["VmRSS"] - before["VmRSS"]) / 1024 / STREAMS, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=160_000)
    parser.add_argument("--segment-mib", type=int, default=8)
    parser.add_argument("--codecs", default="none", help="codecs of the batches, comma-separated")
    parser.add_argument("--value-bytes", type=int, default=1000)
    parser.add_argument("--s3-server", choices=("moto", "s3rver"), default="moto")
    parser.add_argument(
        "--bare-server", nargs=3, type=int, metavar=("PORT", "BYTES", "PIECE"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    codecs = tuple(Codec[name.strip().upper()] for name in args.codecs.split(","))
    if args.bare_server:
        run_bare_server(*args.bare_server)
        return
    with (
        tempfile.TemporaryDirectory(prefix="rlm-bench-stream-") as tmp,
        s3_server(args.s3_server, Path(tmp) / "s3") as endpoint,
    ):
        work = Path(tmp)
        spec = partition_spec(args.records, codecs, args.value_bytes, args.segment_mib)
        produce(work / "logs", spec)
        served = start_rlm(work, work / "logs", extra=stream_settings(endpoint, "tier"))
        try:
            partition = tiered_partition(served)
            highest = int(partition["highest_tiered_offset"])
            workload = {
                "codecs": [c.name.lower() for c in codecs],
                "value_bytes": args.value_bytes,
                "s3_server": args.s3_server,
            }
            result = {"python": platform.python_version(), "workload": workload}
            result["local"] = encodings(served, highest)
            drop_tiered_locally(work / "logs", highest)
            result.update(run(served, endpoint, highest))
            print(json.dumps(result))
        finally:
            stop(served)


@contextlib.contextmanager
def s3_server(kind: str, directory: Path) -> Iterator[str]:
    """The endpoint of an S3 server (its own process: ``moto`` or ``s3rver``, which keeps its
    objects under ``directory``) with the bucket :data:`BUCKET`, while open; this process's AWS
    credentials are set for it."""
    key = "S3RVER" if kind == "s3rver" else "bench"
    credentials = {"AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": key}
    os.environ.update({**credentials, "AWS_DEFAULT_REGION": "us-east-1"})
    server, endpoint = start_s3rver(directory) if kind == "s3rver" else start_moto()
    try:
        import boto3
        from botocore.config import Config

        config = Config(s3={"addressing_style": "path"})
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", config=config)
        client.create_bucket(Bucket=BUCKET)
        yield endpoint
    finally:
        server.terminate()
        server.wait(30)


def partition_spec(
    records: int, codecs: tuple[Codec, ...], value_bytes: int, segment_mib: int
) -> ProduceSpec:
    """The generated partition streamed: one topic of one partition, no transactions."""
    return ProduceSpec(
        topics=1,
        partitions=1,
        records=records,
        value_bytes=value_bytes,
        segment_bytes=segment_mib * MIB,
        index_interval_bytes=64 * 1024,
        transaction_ratio=0.0,
        codecs=codecs,
        seed=1,
    )


def stream_settings(endpoint: str, prefix: str) -> dict[str, Any]:
    """``rlm serve``'s settings over the S3 server at ``endpoint`` (objects under ``prefix``)."""
    return {
        "remote.url": f"s3://{BUCKET}/{prefix}",
        "s3.endpoint.url": endpoint,
        "s3.region": "us-east-1",
        "s3.addressing.style": "path",
        "log.dirs.watch": False,
        "remote.fetch.stream.buffer.bytes": BUFFER_BYTES,
    }


def encodings(served: Any, highest: int, s3_mb_per_s: float | None = None) -> dict[str, Any]:
    """NDJSON and Arrow records/s over ``[0, highest]`` vs rlm's own decode of the same batches;
    over S3, beside the records/s the S3 server's own rate (``s3_mb_per_s``, a bare GET's) allows."""
    url = f"{served.http}/v1/topics/{TOPIC}/partitions/0/records"
    params = {"offset": "0", "end_offset": str(highest + 1)}
    raw = asyncio.run(timed_stream(url, "application/octet-stream", params, keep=True)).body()
    headers = list(iter_headers(BytesSource(raw), 0))
    records = decode_once(raw, headers)[0]  # warm-up
    decodes: list[tuple[int, float, float]] = []
    server_cpu: dict[str, list[float]] = {"bare": [], "ndjson": [], "arrow": []}
    media_types = {"ndjson": "application/x-ndjson", "arrow": "application/vnd.apache.arrow.stream"}
    runs: dict[str, list[Streamed]] = {"bare": [], "ndjson": [], "arrow": []}
    bodies: dict[str, bytes] = {}
    with bare_server(len(raw), CEILING_PIECE_BYTES) as (bare, bare_pid):
        urls = {"bare": (bare, OCTET, {}), **{n: (url, m, params) for n, m in media_types.items()}}
        pids = {"bare": bare_pid, "ndjson": served.process.pid, "arrow": served.process.pid}
        for name, (where, media, args) in urls.items():  # warm-up (imports, caches); the bodies
            bodies[name] = asyncio.run(timed_stream(where, media, args, keep=True)).body()
        for _ in range(REPEATS):  # interleaved, so that all (the decode too) see the same load
            decodes.append(decode_once(raw, headers))
            for name, (where, media, args) in urls.items():
                before = cpu_seconds(pids[name])
                runs[name].append(timed(timed_stream(where, media, args)))
                server_cpu[name].append(cpu_seconds(pids[name]) - before)
    own = records / median([seconds for _, seconds, _ in decodes])
    decode_cpu = sum(cpu for _, _, cpu in decodes) / len(decodes) / records
    bare_runs = runs.pop("bare")
    ceiling = bare_runs[0].size / MIB / median([r.seconds for r in bare_runs])
    # Sums over the runs: /proc counts a process's CPU in clock ticks (10 ms), a fourth of a run.
    bare_bytes = sum(r.size for r in bare_runs)
    send_per_byte = sum(server_cpu["bare"]) / bare_bytes  # the bare endpoint's CPU
    receive_per_byte = sum(r.cpu_seconds for r in bare_runs) / bare_bytes  # the client's
    result: dict[str, Any] = {
        "http_ceiling": figure(
            {
                "bare_endpoint_mb_per_s": round(ceiling, 1),
                "runs_s": [round(r.seconds, 3) for r in bare_runs],
                "piece_bytes": CEILING_PIECE_BYTES,
                "raw_records_per_s_at_ceiling": round(ceiling * MIB * records / len(raw)),
                "server_cpu_us_per_mib": round(send_per_byte * MIB * 1e6, 1),
                "client_cpu_us_per_mib": round(receive_per_byte * MIB * 1e6, 1),
            }
        )
    }
    for name, target in (("ndjson", 0.5), ("arrow", 0.8)):
        body, seconds = bodies[name], median([r.seconds for r in runs[name]])
        if any(r.size != len(body) for r in runs[name]):
            sizes = [r.size for r in runs[name]]
            raise SystemExit(f"{name}: the runs' sizes {sizes} differ from the first body's {len(body)}")
        if name == "ndjson":
            sent = body.count(b"\n")
        else:
            import pyarrow as pa

            sent = pa.ipc.open_stream(body).read_all().num_rows
        if sent != records:
            raise SystemExit(f"{name}: {sent} records streamed, {records} decoded")
        rate = sent / seconds
        at_ceiling = ceiling * MIB * sent / len(body)
        encode_per_s, encode_cpu, speedup = encode_rate(raw, name)
        per_record = len(body) / sent
        floor = {
            "encode": encode_cpu,
            "send": send_per_byte * per_record,
            "receive": receive_per_byte * per_record,
        }
        at_cpu = speedup / sum(floor.values())
        paired = median(
            [decode / run.seconds for (_, decode, _), run in zip(decodes, runs[name], strict=True)]
        )
        result[name] = figure(
            {
                "records": sent,
                "rlm_records_per_s": round(rate),
                "rlm_decode_records_per_s": round(own),
                "ratio": round(paired, 2),
                "ratio_of_medians": round(rate / own, 2),
                "runs_s": [round(r.seconds, 3) for r in runs[name]],
                "server_cpu_us_per_record": round(sum(server_cpu[name]) / REPEATS / sent * 1e6, 2),
                "client_cpu_us_per_record": round(
                    sum(r.cpu_seconds for r in runs[name]) / REPEATS / sent * 1e6, 2
                ),
                "rlm_decode_cpu_us_per_record": round(decode_cpu * 1e6, 2),
                "target_ratio_min": target,
                "bytes_per_record": round(len(body) / sent),
                "records_per_s_at_http_ceiling": round(at_ceiling),
                "ratio_at_http_ceiling": round(at_ceiling / own, 2),
                "share_of_http_ceiling": round(rate / at_ceiling, 2),
                "in_process_encode_records_per_s": round(encode_per_s),
                "cpu_ceiling": {
                    "cores": CORES,
                    "parallel_speedup": round(speedup, 2),
                    "us_per_record": {part: round(cpu * 1e6, 3) for part, cpu in floor.items()},
                    "records_per_s": round(at_cpu),
                    "ratio": round(at_cpu / own, 2),
                },
            }
        )
        if s3_mb_per_s is not None:  # the stored bytes of every record come through the S3 server
            at_s3 = s3_mb_per_s * MIB * records / len(raw)
            result[name]["records_per_s_at_s3_ceiling"] = round(at_s3)
            result[name]["ratio_at_s3_ceiling"] = round(at_s3 / own, 2)
    return result


def run(served: Any, endpoint: str, highest: int) -> dict[str, Any]:
    import boto3

    url = f"{served.http}/v1/topics/{TOPIC}/partitions/0/records"
    params = {"offset": "0", "end_offset": str(highest + 1)}
    listing = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").list_objects_v2(
        Bucket=BUCKET
    )
    keys = sorted(o["Key"] for o in listing.get("Contents", []) if o["Key"].endswith(".log"))
    asyncio.run(timed_stream(url, "application/octet-stream", params))  # warm-up
    asyncio.run(bare_gets(endpoint, keys))
    raw_runs, bare_runs = [], []
    for _ in range(REPEATS):  # interleaved, so that both see the same load
        raw_runs.append(timed(timed_stream(url, "application/octet-stream", params)))
        bare_runs.append(timed(bare_gets(endpoint, keys)))
    raw_size, raw_s = raw_runs[0].size, median([r.seconds for r in raw_runs])
    bare_size, bare_s = bare_runs[0][0], median([r[1] for r in bare_runs])
    raw_mbps, bare_mbps = raw_size / MIB / raw_s, bare_size / MIB / bare_s
    paired = median(
        [(raw_size / r.seconds) / (b[0] / b[1]) for r, b in zip(raw_runs, bare_runs, strict=True)]
    )
    result: dict[str, Any] = {
        "range": {"first_offset": 0, "end_offset": highest + 1, "bytes": raw_size, "objects": len(keys)},
        "raw": figure(
            {
                "rlm_mb_per_s": round(raw_mbps, 1),
                "bare_aiobotocore_mb_per_s": round(bare_mbps, 1),
                "ratio": round(paired, 2),
                "ratio_of_medians": round(raw_mbps / bare_mbps, 2),
                "target_ratio_min": 0.8,
            }
        ),
    }
    result["remote"] = encodings(served, highest, bare_mbps)
    status, _ = http_get(f"{served.http}/readyz")
    assert status == 200
    many = asyncio.run(concurrent_slow_streams(url, params, served.process.pid))
    # rlm serve's pools: offset readers 5, remote fetch 10, metadata 10, copier 4, S3 part uploads 4,
    # stream I/O (the defaults), the event loop's resolver pool (libuv's, bounded by serve), and the
    # main thread.
    configured = 5 + 10 + 10 + 4 + 4 + DEFAULT_IO_THREADS + LOOP_THREADS + 1
    result["concurrent"] = figure(
        {
            **many,
            "threads_bound": configured + 8,
            "rss_bound_mib": STREAMS * BUFFER_BYTES // MIB + 200,
        }
    )
    return result


if __name__ == "__main__":
    main()
