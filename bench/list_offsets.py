"""ListOffsets requests naming many partitions against ``rlm serve``: do they keep their deadline?
Prints one JSON document.

``rlm serve`` (one tiered partition, the filesystem remote store) is asked, over real HTTP and gRPC,
for partitions it has never heard of (each needs the metadata store to say so):

* ``rest_10000``: one ``POST /v1/list-offsets`` naming 10,000 partitions, ``timeout_ms`` 2000;
* ``rest_4x10000_concurrent``: four such requests at once, ``timeout_ms`` 1000 each;
* ``grpc_10000``: one gRPC ``ListOffsets`` naming 10,000 partitions, ``timeout_ms`` 2000;
* ``rest_over_the_limit``: 10,001 partitions (``list.offsets.max.partitions`` is 10,000), and
  ``rest_over_the_limit_in_two_topics``: 10,002 in two topics of 5,001.

Each reports its wall time against the deadline it asked for, the HTTP status, and how many
partitions answered each Kafka error code (3 UNKNOWN_TOPIC_OR_PARTITION, 7 REQUEST_TIMED_OUT).
The baseline is the deadline itself: a request that keeps it takes its ``timeout_ms`` at most,
plus what sending 10,000 answers back costs. Per metadata backend: SQLite, and PostgreSQL on
127.0.0.1:5432 (a database of its own, dropped afterwards) unless ``--backends sqlite``.

    .venv/bin/python bench/list_offsets.py [--backends sqlite,postgres] [--partitions 10000]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: import rlm from the checkout
    sys.path.insert(0, str(ROOT))

from bench.api import READ_TOKEN, start_rlm, stop  # noqa: E402
from rlm.log.produce import ProduceSpec, produce  # noqa: E402

UNKNOWN_TOPIC = "never-produced"
POSTGRES_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"


def post(base: str, body: dict[str, Any], timeout_s: float = 600.0) -> tuple[int, dict[str, Any] | None]:
    request = urllib.request.Request(
        f"{base}/v1/list-offsets",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {READ_TOKEN}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def request_body(partitions: int, timeout_ms: int, topics: int = 1) -> dict[str, Any]:
    """``partitions`` partitions in all, spread over ``topics`` topics."""
    per_topic = -(-partitions // topics)
    names = [UNKNOWN_TOPIC if topics == 1 else f"{UNKNOWN_TOPIC}-{t}" for t in range(topics)]
    return {
        "timeout_ms": timeout_ms,
        "topics": [
            {
                "name": name,
                "partitions": [
                    {"partition_index": p, "timestamp": 0}
                    for p in range(min(per_topic, partitions - t * per_topic))
                ],
            }
            for t, name in enumerate(names)
        ],
    }


def codes(answer: dict[str, Any] | None) -> dict[str, int]:
    if not answer or "topics" not in answer:
        return {}
    counted = Counter(p["error_code"] for t in answer["topics"] for p in t["partitions"])
    return {str(code): count for code, count in sorted(counted.items())}


def timed_rest(base: str, partitions: int, timeout_ms: int, topics: int = 1) -> dict[str, Any]:
    started = time.monotonic()
    status, answer = post(base, request_body(partitions, timeout_ms, topics))
    seconds = time.monotonic() - started
    result = {
        "seconds": round(seconds, 2),
        "deadline_s": timeout_ms / 1000,
        "status": status,
        "error_codes": codes(answer),
    }
    if status != 200 and answer is not None:
        result["error"] = answer.get("error")
    return result


def concurrent_rest(base: str, partitions: int, timeout_ms: int, clients: int) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = [{} for _ in range(clients)]

    def run(i: int) -> None:
        results[i] = timed_rest(base, partitions, timeout_ms)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def timed_grpc(target: str, partitions: int, timeout_ms: int) -> dict[str, Any]:
    import grpc

    from api.gen.rlm.v1 import rlm_pb2 as pb
    from api.gen.rlm.v1 import rlm_pb2_grpc

    request = pb.ListOffsetsRequest(
        timeout_ms=timeout_ms,
        topics=[
            pb.ListOffsetsTopic(
                name=UNKNOWN_TOPIC,
                partitions=[
                    pb.ListOffsetsPartition(partition_index=p, timestamp=0) for p in range(partitions)
                ],
            )
        ],
    )
    with grpc.insecure_channel(target) as channel:
        stub = rlm_pb2_grpc.RemoteLogManagerStub(channel)
        started = time.monotonic()
        answer = stub.ListOffsets(request, metadata=(("authorization", f"Bearer {READ_TOKEN}"),), timeout=600)
        seconds = time.monotonic() - started
    counted = Counter(p.error_code for t in answer.topics for p in t.partitions)
    return {
        "seconds": round(seconds, 2),
        "deadline_s": timeout_ms / 1000,
        "error_codes": {str(code): n for code, n in sorted(counted.items())},
    }


@contextmanager
def database(backend: str, work: Path) -> Iterator[str]:
    if backend == "sqlite":
        yield f"sqlite:///{work / 'metadata.db'}"
        return
    import psycopg

    name = f"rlm_bench_{os.getpid()}"
    with psycopg.connect(POSTGRES_SERVER, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(POSTGRES_SERVER, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def run_backend(backend: str, partitions: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="rlm-bench-list-offsets-") as tmp:
        work = Path(tmp)
        produce(
            work / "logs", ProduceSpec(topics=1, partitions=1, records=2000, segment_bytes=64 * 1024, seed=1)
        )
        with database(backend, work) as url:
            served = start_rlm(
                work, work / "logs", database=url, extra={"remote.log.manager.task.interval.ms": 600_000}
            )
            try:
                return {
                    "rest_10000": timed_rest(served.http, partitions, 2000),
                    "rest_4x10000_concurrent": concurrent_rest(served.http, partitions, 1000, 4),
                    "grpc_10000": timed_grpc(served.grpc, partitions, 2000),
                    "rest_over_the_limit": timed_rest(served.http, partitions + 1, 2000),
                    "rest_over_the_limit_in_two_topics": timed_rest(
                        served.http, partitions + 2, 2000, topics=2
                    ),
                }
            finally:
                stop(served)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--partitions", type=int, default=10_000)
    args = parser.parse_args()
    report: dict[str, Any] = {
        "benchmark": "list_offsets_many_partitions",
        "partitions_per_request": args.partitions,
        "baseline": "the deadline each request asked for (deadline_s)",
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
        "backends": {},
    }
    for backend in args.backends.split(","):
        report["backends"][backend] = run_backend(backend, args.partitions)
    report["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
