"""``rlm serve`` while its metadata database is down or hangs: every endpoint keeps its deadline.

The real server (a subprocess, REST and gRPC) talks to the real PostgreSQL through a TCP proxy the
test controls (:mod:`tests.tcp_proxy`): passing bytes, refusing connections (a database that is
down), or accepting them and never answering (a frozen database, or a network that swallows
packets). Three partitions, all tiered to a filesystem remote store:

* ``orders-0``: its older segments deleted locally, so early timestamps are only in the remote tier;
* ``orders-1`` and ``orders-2``: still whole in the broker's log (their remote copies overlap it).

What must hold while the database does not answer: ``/healthz`` and ``/metrics`` answer at once,
``/readyz`` and gRPC health say "metadata store unreachable" within ``readiness.timeout.ms``,
answers the broker's log holds exactly come from it, the others fail fast with 503 / UNAVAILABLE,
and no request outlives its deadline, even with 60 lookups stuck on the database. The bounds on
elapsed times are loose (the deadline plus a few seconds, on a machine shared with other work):
they tell a deadline that holds from a request that hangs, they measure nothing.
"""

from __future__ import annotations

import concurrent.futures
import functools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.engine import make_url

from api.gen.rlm.v1 import rlm_pb2 as pb
from api.gen.rlm.v1 import rlm_pb2_grpc
from rlm.bootstrap import build_runtime
from rlm.config import Settings, TopicSettings
from rlm.log.logdir import LogDir
from tests.e2e.conftest import ADMIN_TOKEN, READ_TOKEN, ServeProcess, bearer, start_serve
from tests.grpc_support import health_check
from tests.lookup_support import TOPIC, BatchPlan, PartitionPlan, Truth, tier_partition, write_partitions
from tests.metadata_support import create_postgres_database, drop_postgres_database
from tests.tcp_proxy import Mode, TcpProxy

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

T = TypeVar("T")
READ_METADATA = (("authorization", f"Bearer {READ_TOKEN}"),)
#: The server's metadata deadlines (psycopg counts connect timeouts in whole seconds, at least 2).
CONNECT_TIMEOUT_MS = 4000
STATEMENT_TIMEOUT_MS = 3000
POOL_TIMEOUT_MS = 1000
READINESS_TIMEOUT_MS = 1000
RETRY_BACKOFF_MS = 1000
#: What a metadata call may take at most before failing: a pool wait, then a connect or a
#: statement and the second rlm waits for an answer past the statement timeout.
STORE_CALL_S = (POOL_TIMEOUT_MS + max(CONNECT_TIMEOUT_MS, STATEMENT_TIMEOUT_MS + 1000)) / 1000
#: Added to every deadline: scheduling on a loaded machine, never a 97-second hang.
SLACK_S = 4.0
LOOKUP_TIMEOUT_MS = 2000
#: The stuck lookups' own timeout: longer than the database's, which then fails them first.
STUCK_TIMEOUT_MS = 8000
STUCK_LOOKUPS = 60


def _spread(count: int) -> tuple[BatchPlan, ...]:
    return tuple(BatchPlan(timestamps=(i * 100, i * 100 + 3_000, i * 100 + 40)) for i in range(count))


PLANS = {
    0: PartitionPlan(_spread(30), tiering="remote", local_deleted=0.5),
    1: PartitionPlan(_spread(20), tiering="both"),
    2: PartitionPlan(_spread(20), tiering="both"),
}


@dataclass
class Outage:
    serve: ServeProcess
    proxy: TcpProxy
    truths: dict[int, Truth]
    http: httpx.Client
    channel: grpc.Channel
    stub: rlm_pb2_grpc.RemoteLogManagerStub

    def get_offset(
        self, partition: int, timestamp: int | str, timeout_ms: int = LOOKUP_TIMEOUT_MS
    ) -> httpx.Response:
        return self.http.get(
            f"/v1/topics/{TOPIC}/partitions/{partition}/offsets",
            params={"timestamp": str(timestamp), "timeout_ms": timeout_ms},
        )

    def remote_timestamp(self) -> int:
        """A timestamp whose answer is in orders-0's remote tier only."""
        truth = self.truths[0]
        first = truth.records[0].record
        assert first.offset < truth.local_start_offset
        return first.timestamp

    def local_timestamp(self) -> int:
        """A timestamp of orders-0 above every remote one: its answer is in the broker's log."""
        return max(r.record.timestamp for r in self.truths[0].records) - 10

    def metric(self, name: str, **labels: str) -> float:
        text = self.http.get("/metrics").text
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    return sample.value
        return 0.0

    def health(self) -> int:
        reply = health_check(self.channel)(health_pb2.HealthCheckRequest(service=""), timeout=30)
        status: int = reply.status
        return status


@pytest.fixture(scope="module")
def outage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Outage]:
    root = tmp_path_factory.mktemp("outage")
    log_dir = root / "logs"
    truths = write_partitions(log_dir, PLANS)
    url = create_postgres_database()
    try:
        from metadata.schema import upgrade

        upgrade(url)
        direct = Settings(
            log_dirs=(log_dir,),
            broker_id=1,
            metadata_url=url,
            remote_url=(root / "remote").as_uri(),
            remote_log_index_cache_dir=root / "tiering-cache",
            topic_defaults=TopicSettings(retention_ms=-1),
        )
        runtime = build_runtime(direct)
        try:
            for partition, plan in PLANS.items():
                tier_partition(runtime, LogDir(log_dir).partition(TOPIC, partition), truths[partition], plan)
        finally:
            runtime.close()
        target = make_url(url)
        with TcpProxy((target.host or "127.0.0.1", target.port or 5432)) as proxy:
            proxied = target.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
            serve = start_serve(root, _serve_settings(direct, proxied, root))
            http = httpx.Client(base_url=serve.http_url, timeout=60.0, headers=bearer(READ_TOKEN))
            channel = grpc.insecure_channel(serve.grpc_target)
            try:
                yield Outage(serve, proxy, truths, http, channel, rlm_pb2_grpc.RemoteLogManagerStub(channel))
            finally:
                proxy.set_mode(Mode.PASS)
                channel.close()
                http.close()
                serve.terminate()
    finally:
        drop_postgres_database(url)


def _serve_settings(direct: Settings, proxied_url: str, root: Path) -> dict[str, Any]:
    return {
        "log.dirs": [str(d) for d in direct.log_dirs],
        "broker.id": 1,
        "metadata.url": proxied_url,
        "remote.url": direct.remote_url,
        "remote.log.index.cache.dir": str(root / "index-cache"),
        "auth.tokens": f"read:{READ_TOKEN},admin:{ADMIN_TOKEN}",
        "remote.log.manager.task.interval.ms": 600_000,  # the copier's first pass only
        "metadata.pool.size": 4,
        "metadata.pool.timeout.ms": POOL_TIMEOUT_MS,
        "metadata.connect.timeout.ms": CONNECT_TIMEOUT_MS,
        "metadata.statement.timeout.ms": STATEMENT_TIMEOUT_MS,
        "metadata.retry.backoff.ms": RETRY_BACKOFF_MS,
        "readiness.timeout.ms": READINESS_TIMEOUT_MS,
        "topics": {"defaults": {"retention.ms": -1}},
    }


def timed(call: Callable[[], T]) -> tuple[T, float]:
    started = time.monotonic()
    result = call()
    return result, time.monotonic() - started


def grpc_code(call: Callable[[], object]) -> tuple[grpc.StatusCode, str]:
    try:
        call()
    except grpc.RpcError as exc:
        error: Any = exc
        return error.code(), error.details()
    return grpc.StatusCode.OK, ""


def wait_for(condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the server did not recover from the outage"
        time.sleep(0.1)


@pytest.fixture
def healthy(outage: Outage) -> Iterator[Outage]:
    """The database passing again (the server recovered) before and after each test."""
    outage.proxy.set_mode(Mode.PASS)
    wait_for(lambda: outage.http.get("/readyz").status_code == 200)
    wait_for(lambda: outage.get_offset(0, outage.remote_timestamp()).status_code == 200)
    yield outage
    outage.proxy.set_mode(Mode.PASS)
    wait_for(lambda: outage.http.get("/readyz").status_code == 200)
    wait_for(lambda: outage.get_offset(0, outage.remote_timestamp()).status_code == 200)


def assert_answers_as_the_truth(response: httpx.Response, truth: Truth, timestamp: int) -> None:
    assert response.status_code == 200, response.text
    body = response.json()
    want = truth.for_timestamp(timestamp)
    assert (body["offset"], body["timestamp"], body["leader_epoch"]) == (
        want.offset,
        want.timestamp,
        want.leader_epoch,
    )


def test_with_the_database_refusing_local_answers_go_on_and_the_others_fail_fast(healthy: Outage) -> None:
    outage = healthy
    local_before = outage.get_offset(0, outage.local_timestamp())  # orders-0's view is now known
    assert_answers_as_the_truth(local_before, outage.truths[0], outage.local_timestamp())
    outage.proxy.set_mode(Mode.REFUSE)

    health, took = timed(lambda: outage.http.get("/healthz"))
    assert health.status_code == 200 and took < SLACK_S
    ready, took = timed(lambda: outage.http.get("/readyz"))
    assert ready.status_code == 503 and took < READINESS_TIMEOUT_MS / 1000 + SLACK_S
    assert ready.json()["problems"][0].startswith("metadata store unreachable"), ready.json()

    # In the broker's log, exactly: orders-2 was never looked up (no view: its log holds every
    # offset), orders-0 above its remote timestamps (the view read before the outage).
    whole = outage.truths[2].records[5].record.timestamp
    assert_answers_as_the_truth(outage.get_offset(2, whole), outage.truths[2], whole)
    assert outage.get_offset(2, whole).json()["tier"] == "local"
    assert_answers_as_the_truth(
        outage.get_offset(0, outage.local_timestamp()), outage.truths[0], outage.local_timestamp()
    )
    # The remote tier may hold the answer: only the database can tell. 503 at once.
    remote, took = timed(lambda: outage.get_offset(0, outage.remote_timestamp()))
    assert remote.status_code == 503 and took < SLACK_S, remote.text
    assert "metadata" in remote.json()["error"] and remote.headers["retry-after"] == "1"
    unknown, took = timed(lambda: outage.get_offset(9, 0))
    assert unknown.status_code == 503 and took < SLACK_S

    body = {
        "timeout_ms": LOOKUP_TIMEOUT_MS,
        "topics": [
            {
                "name": TOPIC,
                "partitions": [
                    {"partition_index": 0, "timestamp": outage.remote_timestamp()},
                    {"partition_index": 1, "timestamp": whole},
                    {"partition_index": 2, "timestamp": whole},
                    {"partition_index": 9, "timestamp": 0},
                ],
            }
        ],
    }
    listed, took = timed(lambda: outage.http.post("/v1/list-offsets", json=body))
    assert listed.status_code == 200 and took < LOOKUP_TIMEOUT_MS / 1000 + SLACK_S
    assert [p["error_code"] for p in listed.json()["topics"][0]["partitions"]] == [56, 0, 0, 56]

    local_grpc = outage.stub.GetOffset(
        pb.GetOffsetRequest(topic=TOPIC, partition=2, timestamp=str(whole)),
        metadata=READ_METADATA,
        timeout=10,
    )
    assert (local_grpc.offset, local_grpc.tier) == (
        outage.truths[2].for_timestamp(whole).offset,
        pb.TIER_LOCAL,
    )
    request = pb.GetOffsetRequest(topic=TOPIC, partition=0, timestamp=str(outage.remote_timestamp()))
    (code, details), took = timed(
        lambda: grpc_code(lambda: outage.stub.GetOffset(request, metadata=READ_METADATA, timeout=10))
    )
    assert code is grpc.StatusCode.UNAVAILABLE and "metadata" in details and took < SLACK_S
    status, took = timed(outage.health)
    assert (
        status == health_pb2.HealthCheckResponse.NOT_SERVING and took < READINESS_TIMEOUT_MS / 1000 + SLACK_S
    )

    # Records the broker holds are read without the database; the others are not.
    records = outage.http.get(f"/v1/topics/{TOPIC}/partitions/2/records", params={"offset": 0})
    assert records.status_code == 200 and records.json()["tier"] == "local"
    first = outage.truths[0].records[0].record.offset
    remote_records, took = timed(
        lambda: outage.http.get(f"/v1/topics/{TOPIC}/partitions/0/records", params={"offset": first})
    )
    assert remote_records.status_code == 503 and took < SLACK_S
    topics, took = timed(lambda: outage.http.get("/v1/topics"))
    assert topics.status_code == 503 and took < STORE_CALL_S + SLACK_S

    metrics, took = timed(lambda: outage.metric("rlm_metadata_errors_total", kind="connect"))
    assert metrics >= 1 and took < SLACK_S


def test_with_the_database_silent_and_60_lookups_stuck_every_endpoint_keeps_its_deadline(
    healthy: Outage,
) -> None:
    outage = healthy
    outage.proxy.set_mode(Mode.SILENT)
    timeout_s = LOOKUP_TIMEOUT_MS / 1000
    stuck_s = STUCK_TIMEOUT_MS / 1000

    # One client for all of them (one each would cost seconds of CPU before the first was sent).
    stuck_client = httpx.Client(
        base_url=outage.serve.http_url,
        timeout=60.0,
        headers=bearer(READ_TOKEN),
        limits=httpx.Limits(max_connections=STUCK_LOOKUPS),
    )

    def rest_lookup(partition: int) -> tuple[int, float]:
        # Partitions never heard of: each needs the database to say so.
        response, took = timed(
            lambda: stuck_client.get(
                f"/v1/topics/{TOPIC}/partitions/{partition}/offsets",
                params={"timestamp": "0", "timeout_ms": STUCK_TIMEOUT_MS},
            )
        )
        return response.status_code, took

    def grpc_lookup(partition: int) -> tuple[grpc.StatusCode, float]:
        request = pb.GetOffsetRequest(topic=TOPIC, partition=partition, timestamp="latest-tiered")
        (code, _), took = timed(
            lambda: grpc_code(lambda: outage.stub.GetOffset(request, metadata=READ_METADATA, timeout=stuck_s))
        )
        return code, took

    with concurrent.futures.ThreadPoolExecutor(max_workers=STUCK_LOOKUPS + 20) as clients:
        stuck = [clients.submit(rest_lookup, 100 + i) for i in range(STUCK_LOOKUPS)]
        stuck_grpc = [clients.submit(grpc_lookup, 300 + i) for i in range(20)]
        time.sleep(0.3)
        health, health_took = timed(lambda: outage.http.get("/healthz"))
        metrics, metrics_took = timed(lambda: outage.http.get("/metrics"))
        ready, ready_took = timed(lambda: outage.http.get("/readyz"))
        status, health_grpc_took = timed(outage.health)
        # Counted once every probe has answered: those were all in flight meanwhile.
        in_flight = sum(not f.done() for f in stuck)
        answers = [f.result() for f in stuck]
        grpc_answers = [f.result() for f in stuck_grpc]
    stuck_client.close()

    assert in_flight > 0, "the lookups were not stuck on the database: the probes proved nothing"
    assert health.status_code == 200 and health_took < SLACK_S
    assert metrics.status_code == 200 and metrics_took < SLACK_S
    assert "rlm_metadata_errors_total" in metrics.text
    assert ready.status_code == 503 and ready_took < READINESS_TIMEOUT_MS / 1000 + SLACK_S
    assert "metadata store unreachable" in ready.json()["problems"][0]
    assert status == health_pb2.HealthCheckResponse.NOT_SERVING
    assert health_grpc_took < READINESS_TIMEOUT_MS / 1000 + SLACK_S
    # Each lookup ran out of time (504) or was told the database is unreachable (503), in time.
    assert {code for code, _ in answers} <= {503, 504}, answers
    assert max(took for _, took in answers) < stuck_s + SLACK_S, answers
    assert {code for code, _ in grpc_answers} <= {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
    }
    assert max(took for _, took in grpc_answers) < stuck_s + SLACK_S

    # The database still silent: once a call has failed, the broker's log answers what it holds
    # exactly and the rest fails at once.
    whole = outage.truths[1].records[3].record.timestamp
    wait_for(lambda: outage.get_offset(1, whole).status_code == 200, timeout_s=STORE_CALL_S + SLACK_S)
    assert_answers_as_the_truth(outage.get_offset(1, whole), outage.truths[1], whole)
    remote, took = timed(lambda: outage.get_offset(0, outage.remote_timestamp()))
    assert remote.status_code in (503, 504) and took < timeout_s + SLACK_S
    many = {
        "timeout_ms": LOOKUP_TIMEOUT_MS,
        "topics": [
            {"name": "other", "partitions": [{"partition_index": p, "timestamp": 0} for p in range(10_000)]}
        ],
    }
    listed, took = timed(lambda: outage.http.post("/v1/list-offsets", json=many))
    assert listed.status_code == 200 and took < timeout_s + SLACK_S
    assert {p["error_code"] for p in listed.json()["topics"][0]["partitions"]} <= {7, 56}
    for path in ("/v1/topics", f"/v1/topics/{TOPIC}/partitions/0/segments"):
        response, took = timed(functools.partial(outage.http.get, path))
        assert response.status_code == 503 and took < STORE_CALL_S + SLACK_S, (path, response.text)
    kinds = {kind: outage.metric("rlm_metadata_errors_total", kind=kind) for kind in ("connect", "timeout")}
    assert sum(kinds.values()) >= 1, kinds


def test_a_request_naming_10000_partitions_keeps_its_deadline_and_more_are_refused(healthy: Outage) -> None:
    outage = healthy
    partitions = [{"partition_index": p, "timestamp": 0} for p in range(10_000)]
    topics: list[dict[str, Any]] = [{"name": "never-produced", "partitions": partitions}]
    body = {"timeout_ms": LOOKUP_TIMEOUT_MS, "topics": topics}
    listed, took = timed(lambda: outage.http.post("/v1/list-offsets", json=body))
    assert listed.status_code == 200 and took < LOOKUP_TIMEOUT_MS / 1000 + SLACK_S
    codes = [p["error_code"] for p in listed.json()["topics"][0]["partitions"]]
    assert len(codes) == 10_000 and set(codes) <= {3, 7}

    request = pb.ListOffsetsRequest(
        timeout_ms=LOOKUP_TIMEOUT_MS,
        topics=[
            pb.ListOffsetsTopic(
                name="never-produced",
                partitions=[pb.ListOffsetsPartition(partition_index=p, timestamp=0) for p in range(10_000)],
            )
        ],
    )
    reply, took = timed(lambda: outage.stub.ListOffsets(request, metadata=READ_METADATA, timeout=60))
    assert took < LOOKUP_TIMEOUT_MS / 1000 + SLACK_S
    assert {p.error_code for t in reply.topics for p in t.partitions} <= {3, 7}

    topics.append({"name": "one-more", "partitions": [{"partition_index": 0, "timestamp": 0}]})
    refused = outage.http.post("/v1/list-offsets", json=body)
    assert refused.status_code == 400
    assert (
        "10001 partitions" in refused.json()["error"]
        and "list.offsets.max.partitions" in refused.json()["error"]
    )
    request.topics.append(
        pb.ListOffsetsTopic(name="one-more", partitions=[pb.ListOffsetsPartition(timestamp=0)])
    )
    code, details = grpc_code(lambda: outage.stub.ListOffsets(request, metadata=READ_METADATA, timeout=60))
    assert code is grpc.StatusCode.INVALID_ARGUMENT and "list.offsets.max.partitions" in details
