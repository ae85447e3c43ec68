"""Benchmark of the lookup APIs of ``rlm serve``; prints one JSON document.

A generated log directory is tiered by ``rlm serve`` itself (SQLite metadata and the filesystem
remote store, the embedded defaults; one uvicorn worker, as ``rlm serve`` always runs). Then:

* REST local-tier lookups/s: ``GET /v1/topics/{t}/partitions/{p}/offsets?timestamp=T`` with a
  read token, for timestamps above the partition's largest remote timestamp (so answered from the
  local log without any remote read), checked to answer ``tier: local`` before the run;
* side by side, a trivial FastAPI endpoint (``GET /ping`` → ``{"ok": true}``) under uvicorn with
  the same settings (host, event loop, HTTP parser, no access log), under the same load
  (target: rlm at least 0.5x its requests/s);
* gRPC unary ``GetOffset`` calls/s for the same timestamps, from a ``grpc.aio`` client with many
  calls in flight, in a process of its own.

The HTTP load generator is ``wrk`` when it is on the PATH (Debian/Ubuntu: ``apt-get install wrk``;
macOS: ``brew install wrk``), else an aiohttp client in a process of its own (it saturates sooner:
compare the servers' CPU shares in the output). Every run reports its server's CPU use (share of
one core, from ``/proc``): near 100 % the server, not the load generator, was the bottleneck.

Usage: ``python bench/api.py [--duration 10] [--connections 64] [--grpc-concurrency 64]``
(or ``python -m bench.api ...`` from the repository's root)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: import rlm from the checkout
    sys.path.insert(0, str(ROOT))

from rlm.log import scan  # noqa: E402
from rlm.log.produce import ProduceSpec, produce  # noqa: E402

READ_TOKEN = "bench-read-token"
TOPIC = "orders"
TARGET_RATIO = 0.5
#: Distinct local-tier timestamps the load cycles through.
TIMESTAMPS = 64


# -- servers ------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def http_get(url: str, token: str | None = None, timeout: float = 5.0) -> tuple[int, Any]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, None


def wait_for(
    condition: Callable[[], bool], what: str, process: subprocess.Popen[bytes], timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if condition():
                return
        except OSError:
            pass
        if process.poll() is not None:
            raise SystemExit(f"{what}: the server exited with {process.returncode}")
        if time.monotonic() > deadline:
            raise SystemExit(f"{what}: not done within {timeout} s")
        time.sleep(0.2)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, every thread included (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Served:
    process: subprocess.Popen[bytes]
    http: str
    grpc: str


def start_rlm(
    work: Path,
    log_dir: Path,
    *,
    database: str | None = None,
    extra: dict[str, Any] | None = None,
    root: Path = ROOT,
) -> Served:
    """``rlm serve`` over ``log_dir`` and ``database`` (default: a new SQLite file), with the
    ``extra`` settings (over the defaults here), run from the checkout ``root`` (this one by
    default); ready when this returns."""
    from metadata.schema import upgrade

    database = database or f"sqlite:///{work / 'metadata.db'}"
    upgrade(database)
    http_port, grpc_port = free_port(), free_port()
    config = work / "rlm.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "log.dirs": [str(log_dir)],
                "metadata.url": database,
                "remote.url": (work / "remote").as_uri(),
                "remote.log.index.cache.dir": str(work / "index-cache"),
                "http.host": "127.0.0.1",
                "http.port": http_port,
                "grpc.host": "127.0.0.1",
                "grpc.port": grpc_port,
                # The first pass runs at start-up; later ones would only disturb the measurement.
                "remote.log.manager.task.interval.ms": 600_000,
                "auth.tokens": f"read:{READ_TOKEN}",
                "topics": {"defaults": {"retention.ms": -1}},
                **(extra or {}),
            }
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLM_")}
    with open(work / "serve.log", "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "rlm", "serve", "--config", str(config), "--log-level", "warning"],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=root,
        )
    served = Served(process, f"http://127.0.0.1:{http_port}", f"127.0.0.1:{grpc_port}")
    wait_for(lambda: http_get(f"{served.http}/readyz")[0] == 200, "rlm serve ready", process, 60)
    return served


def start_trivial() -> Served:
    port = free_port()
    process = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--trivial-server", str(port)])
    served = Served(process, f"http://127.0.0.1:{port}", "")
    wait_for(lambda: http_get(f"{served.http}/ping")[0] == 200, "trivial server ready", process, 30)
    return served


def run_trivial_server(port: int) -> None:
    """The baseline: the smallest FastAPI endpoint, under uvicorn configured as ``rlm serve``'s."""
    import uvicorn
    from fastapi import FastAPI

    app = FastAPI()

    @app.get("/ping")
    async def ping() -> dict[str, bool]:
        return {"ok": True}

    uvicorn.run(app, host="127.0.0.1", port=port, log_config=None, access_log=False)


def stop(served: Served) -> int:
    served.process.send_signal(signal.SIGTERM)
    try:
        return served.process.wait(60)
    except subprocess.TimeoutExpired:
        served.process.kill()
        return served.process.wait()


# -- the data -----------------------------------------------------------------------------------


def tiered_partition(served: Served) -> dict[str, Any]:
    def done() -> bool:
        status, body = http_get(f"{served.http}/v1/topics?topic={TOPIC}", READ_TOKEN)
        parts = body["topics"][0]["partitions"] if status == 200 and body["topics"] else []
        return bool(parts) and all(p["tiered_segments"] > 0 and p["copy_lag_segments"] == 0 for p in parts)

    wait_for(done, "tiering", served.process, 120)
    _, body = http_get(f"{served.http}/v1/topics?topic={TOPIC}", READ_TOKEN)
    partition: dict[str, Any] = body["topics"][0]["partitions"][0]
    return partition


def local_timestamps(served: Served, max_remote: int) -> list[int]:
    """Timestamps above the largest remote one, up to the log's largest: answered locally."""
    path = f"{served.http}/v1/topics/{TOPIC}/partitions/0/offsets"
    _, latest = http_get(f"{path}?timestamp=max-timestamp", READ_TOKEN)
    top = latest["timestamp"]
    step = max(1, (top - max_remote) // TIMESTAMPS)
    stamps = list(range(max_remote + 1, top + 1, step))[:TIMESTAMPS]
    for t in stamps:
        status, body = http_get(f"{path}?timestamp={t}", READ_TOKEN)
        if status != 200 or body["tier"] != "local" or body["offset"] < 0:
            raise SystemExit(f"timestamp {t} is not answered from the local tier: {status} {body}")
    return stamps


# -- HTTP load ----------------------------------------------------------------------------------

_WRK_SCRIPT = """
local paths = {%s}
local headers = {%s}
local i = 0
request = function()
  i = i %% #paths + 1
  return wrk.format("GET", paths[i], headers)
end
"""


def _lua_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _duration_ms(text: str) -> float:
    number, unit = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text).groups()  # type: ignore[union-attr]
    return float(number) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}[unit]


def wrk_load(
    base: str, paths: Sequence[str], headers: dict[str, str], duration: float, connections: int, work: Path
) -> dict[str, Any]:
    script = work / "load.lua"
    script.write_text(
        _WRK_SCRIPT
        % (
            ", ".join(_lua_string(p) for p in paths),
            ", ".join(f"[{_lua_string(k)}] = {_lua_string(v)}" for k, v in headers.items()),
        )
    )
    command = ["wrk", "-t1", f"-c{connections}", f"-d{duration:g}s", "--latency", "-s", str(script), base]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    socket_errors = re.search(r"Socket errors: (.*)", out)
    return {
        "requests_per_s": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),  # type: ignore[union-attr]
        "latency_ms": {
            f"p{p}": _duration_ms(re.search(rf"\s{p}%\s+(\S+)", out).group(1))  # type: ignore[union-attr]
            for p in (50, 90, 99)
        },
        "non_2xx": int(non_2xx.group(1)) if non_2xx else 0,
        "socket_errors": socket_errors.group(1) if socket_errors else None,
    }


async def _aiohttp_load(
    base: str, paths: Sequence[str], headers: dict[str, str], duration: float, connections: int
) -> dict[str, Any]:
    import aiohttp

    done = errors = 0
    latencies: list[float] = []
    deadline = time.monotonic() + duration

    async def worker(session: aiohttp.ClientSession, first: int) -> None:
        nonlocal done, errors
        i = first
        while time.monotonic() < deadline:
            started = time.perf_counter()
            async with session.get(base + paths[i % len(paths)], headers=headers) as response:
                await response.read()
                errors += response.status != 200
            latencies.append(time.perf_counter() - started)
            done += 1
            i += 1

    connector = aiohttp.TCPConnector(limit=connections)
    async with aiohttp.ClientSession(connector=connector) as session:
        started = time.monotonic()
        await asyncio.gather(*(worker(session, n) for n in range(connections)))
        elapsed = time.monotonic() - started
    latencies.sort()
    return {
        "requests_per_s": done / elapsed,
        "latency_ms": {f"p{p}": latencies[int(len(latencies) * p / 100)] * 1000 for p in (50, 90, 99)},
        "non_2xx": errors,
        "socket_errors": None,
    }


def http_load(
    base: str, paths: Sequence[str], headers: dict[str, str], duration: float, connections: int, work: Path
) -> dict[str, Any]:
    if shutil.which("wrk"):
        return wrk_load(base, paths, headers, duration, connections, work)
    argument = json.dumps([base, list(paths), headers, duration, connections])
    out = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--http-load", argument],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    result: dict[str, Any] = json.loads(out)
    return result


def measured(served: Served, run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run a load and add the server's CPU use over it (share of one core)."""
    before, started = cpu_seconds(served.process.pid), time.monotonic()
    result = run()
    used, elapsed = cpu_seconds(served.process.pid) - before, time.monotonic() - started
    return {**result, "server_cpu_percent": round(100 * used / elapsed, 1)}


# -- gRPC load ----------------------------------------------------------------------------------


async def _grpc_load(
    target: str, token: str, stamps: Sequence[int], duration: float, concurrency: int
) -> dict[str, Any]:
    import grpc

    from api.gen.rlm.v1 import rlm_pb2 as pb
    from api.gen.rlm.v1 import rlm_pb2_grpc

    metadata = (("authorization", f"Bearer {token}"),)
    requests = [pb.GetOffsetRequest(topic=TOPIC, partition=0, timestamp=str(t)) for t in stamps]
    done = errors = 0
    latencies: list[float] = []
    async with grpc.aio.insecure_channel(target) as channel:
        stub = rlm_pb2_grpc.RemoteLogManagerStub(channel)
        for request in requests:  # warm up, and check every answer is local
            answer = await stub.GetOffset(request, metadata=metadata, timeout=10)
            if answer.tier != pb.TIER_LOCAL:
                raise SystemExit(f"gRPC: {request.timestamp} is not answered locally: {answer}")
        deadline = time.monotonic() + duration

        async def worker(first: int) -> None:
            nonlocal done, errors
            i = first
            while time.monotonic() < deadline:
                started = time.perf_counter()
                try:
                    await stub.GetOffset(requests[i % len(requests)], metadata=metadata, timeout=10)
                except grpc.aio.AioRpcError:
                    errors += 1
                latencies.append(time.perf_counter() - started)
                done += 1
                i += 1

        started = time.monotonic()
        cpu_started = time.process_time()
        await asyncio.gather(*(worker(n) for n in range(concurrency)))
        elapsed = time.monotonic() - started
        client_cpu = time.process_time() - cpu_started
    latencies.sort()
    return {
        "calls_per_s": done / elapsed,
        "latency_ms": {f"p{p}": latencies[int(len(latencies) * p / 100)] * 1000 for p in (50, 90, 99)},
        "errors": errors,
        "client_cpu_percent": round(100 * client_cpu / elapsed, 1),
    }


def grpc_load(target: str, stamps: Sequence[int], duration: float, concurrency: int) -> dict[str, Any]:
    argument = json.dumps([target, READ_TOKEN, list(stamps), duration, concurrency])
    out = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--grpc-load", argument],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    result: dict[str, Any] = json.loads(out)
    return result


# -- where the time goes -------------------------------------------------------------------------


def _per_call_us(call: Callable[[int], object], calls: int) -> float:
    for i in range(min(200, calls)):
        call(i)
    started = time.process_time()
    for i in range(calls):
        call(i)
    return round((time.process_time() - started) / calls * 1e6, 1)


def _per_asgi_call_us(app: Any, path: str, queries: Sequence[str], token: str, calls: int) -> float:
    """CPU microseconds per request sent straight into an ASGI app (no sockets, no threads)."""

    async def get(query: str) -> None:
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": query.encode(),
            "root_path": "",
            "headers": [(b"host", b"bench"), (b"authorization", f"Bearer {token}".encode())],
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 80),
        }
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await app(scope, receive, send)
        assert sent[0]["status"] == 200, sent

    async def timed() -> float:
        for i in range(min(200, calls)):
            await get(queries[i % len(queries)])
        started = time.process_time()
        for i in range(calls):
            await get(queries[i % len(queries)])
        return round((time.process_time() - started) / calls * 1e6, 1)

    return asyncio.run(timed())


def in_process_costs(config: Path, stamps: Sequence[int], calls: int) -> dict[str, float]:
    """CPU microseconds per call in this process, on one thread: the lookup service alone, and the
    REST app around it and the trivial app called as ASGI apps (what sockets, uvicorn and the
    thread pool add is the rest of the served figures)."""
    from fastapi import FastAPI
    from prometheus_client import CollectorRegistry

    from api.rest.app import create_app
    from rlm.bootstrap import build_runtime
    from rlm.config import load_settings
    from rlm.metastore.model import TopicPartition

    settings = load_settings(config, env={})
    runtime = build_runtime(settings, registry=CollectorRegistry())
    trivial = FastAPI()

    @trivial.get("/ping")
    async def ping() -> dict[str, bool]:
        return {"ok": True}

    tp = TopicPartition(TOPIC, 0)
    path = f"/v1/topics/{TOPIC}/partitions/0/offsets"
    queries = [f"timestamp={t}" for t in stamps]
    try:
        app = create_app(settings, runtime_=runtime)
        return {
            "lookup_service_find_one": _per_call_us(
                lambda i: runtime.list_offsets.find_one(tp, stamps[i % len(stamps)]), calls
            ),
            "rest_app_local_lookup": _per_asgi_call_us(app, path, queries, READ_TOKEN, calls),
            "trivial_app_ping": _per_asgi_call_us(trivial, "/ping", [""], "", calls),
        }
    finally:
        runtime.close()


# -- the run ------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="rlm-bench-api-") as tmp:
        work = Path(tmp)
        spec = ProduceSpec(
            topics=1, partitions=1, records=args.records, segment_bytes=args.segment_kib * 1024, seed=1
        )
        summary = produce(work / "logs", spec)
        rlm = start_rlm(work, work / "logs")
        trivial = start_trivial()
        try:
            partition = tiered_partition(rlm)
            stamps = local_timestamps(rlm, partition["max_remote_timestamp"])
            paths = [f"/v1/topics/{TOPIC}/partitions/0/offsets?timestamp={t}" for t in stamps]
            auth = {"Authorization": f"Bearer {READ_TOKEN}"}
            load = (args.duration, args.connections, work)
            # A short warm-up of each, then the measured runs.
            http_load(trivial.http, ["/ping"], auth, 2, args.connections, work)
            http_load(rlm.http, paths, auth, 2, args.connections, work)
            trivial_result = measured(trivial, lambda: http_load(trivial.http, ["/ping"], auth, *load))
            rest_result = measured(rlm, lambda: http_load(rlm.http, paths, auth, *load))
            grpc_result = measured(
                rlm, lambda: grpc_load(rlm.grpc, stamps, args.duration, args.grpc_concurrency)
            )
        finally:
            stop(trivial)
            stopped = {"rlm_serve_exit_code_after_sigterm": stop(rlm)}
        costs = in_process_costs(work / "rlm.yaml", stamps, args.profile_calls)
    ratio = rest_result["requests_per_s"] / trivial_result["requests_per_s"]
    wrk = shutil.which("wrk")
    return {
        "benchmark": "api",
        "machine": {
            "cpus": os.cpu_count(),
            "c_search_loops": scan.ACCELERATED,
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "load_generator": (
            f"wrk -t1 -c{args.connections} -d{args.duration:g}s (Lua script cycling the paths)"
            if wrk
            else f"aiohttp, {args.connections} connections, separate process"
        ),
        "data": {
            "records": summary.records,
            "segments": summary.segments,
            "tiered_segments": partition["tiered_segments"],
            "local_tier_timestamps": len(stamps),
        },
        "rest_local_lookups": rest_result,
        "trivial_fastapi_ping": trivial_result,
        "rest_vs_trivial_ratio": round(ratio, 3),
        "target_ratio": TARGET_RATIO,
        "meets_target": ratio >= TARGET_RATIO,
        "grpc_get_offset_local": {
            **grpc_result,
            "concurrency": args.grpc_concurrency,
            "client": "grpc.aio, one channel, separate process",
        },
        "cpu_us_per_call_in_process": costs,
        **stopped,
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per measured run")
    parser.add_argument("--connections", type=int, default=64, help="HTTP connections kept open")
    parser.add_argument("--grpc-concurrency", type=int, default=64, help="gRPC calls in flight")
    parser.add_argument("--records", type=int, default=200_000, help="records in the partition")
    parser.add_argument("--segment-kib", type=int, default=4096, help="segment.bytes in KiB")
    parser.add_argument("--profile-calls", type=int, default=2000, help="calls per in-process figure")
    # Entry points of the helper processes.
    parser.add_argument("--trivial-server", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--http-load", help=argparse.SUPPRESS)
    parser.add_argument("--grpc-load", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.trivial_server is not None:
        run_trivial_server(args.trivial_server)
    elif args.http_load is not None:
        print(json.dumps(asyncio.run(_aiohttp_load(*json.loads(args.http_load)))))
    elif args.grpc_load is not None:
        print(json.dumps(asyncio.run(_grpc_load(*json.loads(args.grpc_load)))))
    else:
        print(json.dumps(run(args), indent=2))


if __name__ == "__main__":
    main()
