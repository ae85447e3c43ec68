"""``rlm serve`` end to end: a real subprocess over PostgreSQL and an S3 server over HTTP (moto),
called through real HTTP and gRPC, every answer compared with a brute-force oracle.

Two broker log directories (JBOD) hold five partitions: CreateTime with legacy v1 batches first,
LogAppendTime, transactions with commit and abort markers, every codec, leader changes, a log start
offset moved into the middle of a batch (DeleteRecords) and a high watermark below the log end.
The server tiers the rolled segments; the test then deletes the oldest tiered segments of some
partitions as the broker's local retention would, and asks for many timestamps, every special
value and records from several offsets.

The oracle reads a pristine copy of the log directories with kafka-python (not with rlm's reader):
for a timestamp T, the smallest offset at or after the log start offset whose record timestamp is
≥ T, if below the high watermark, with its batch's leader epoch; for fetches, the very batch bytes
of the ``.log`` files.
"""

from __future__ import annotations

import base64
import datetime
import random
import shutil
import struct
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from kafka.record import MemoryRecords
from sqlalchemy import select

from api.gen.rlm.v1 import rlm_pb2 as pb
from api.gen.rlm.v1 import rlm_pb2_grpc
from metadata.engine import create_engine_for_url
from metadata.models import SegmentRow
from rlm.log.checkpoints import (
    read_leader_epoch_checkpoint,
    read_meta_properties,
    read_offset_checkpoint,
    write_meta_properties,
    write_offset_checkpoint,
)
from rlm.log.logdir import LOG_START_OFFSET_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT
from rlm.log.model import Codec
from rlm.log.produce import ProduceSpec, produce
from rlm.metastore.model import SegmentState
from tests.e2e.conftest import ADMIN_TOKEN, READ_TOKEN, ServeProcess, bearer, start_serve, upgrade_schema
from tests.lookup_support import BROKER_ID, BatchKind, BatchPlan, PartitionPlan, write_partition
from tests.metadata_support import create_postgres_database, drop_postgres_database
from tests.s3_support import REGION, MotoS3

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

Answer = tuple[int, int, int]
"""(offset, timestamp, leader epoch) of a ListOffsets answer."""
NOTHING: Answer = (-1, -1, -1)
SPECIALS = {-1: "latest", -2: "earliest", -3: "max-timestamp", -4: "earliest-local", -5: "latest-tiered"}
READ_METADATA = (("authorization", f"Bearer {READ_TOKEN}"),)
#: How long the copier may take to tier every rolled segment.
TIERING_TIMEOUT_S = 30.0
#: Timestamps asked per partition besides the edges and the specials.
SAMPLED_TARGETS = 25
FETCH_MAX_BYTES = 3000


# -- the oracle ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class OracleRecord:
    offset: int
    timestamp: int
    timestamp_type: str
    leader_epoch: int
    control: bool
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True)
class Batch:
    """One batch as stored in a ``.log`` file: its offsets, records and exact bytes."""

    first: int
    last: int
    data: bytes
    records: tuple[OracleRecord, ...]


@dataclass
class Oracle:
    """One partition, read from the pristine log directory; answers by brute force."""

    topic: str
    partition: int
    batches: list[Batch]
    segments: list[tuple[int, int]]
    """(base offset, last offset) of every segment file, the active one last."""
    epochs: list[tuple[int, int]]
    high_watermark: int
    log_start: int
    local_start: int

    @property
    def records(self) -> Iterator[OracleRecord]:
        for batch in self.batches:
            yield from batch.records

    def visible(self) -> list[OracleRecord]:
        return [r for r in self.records if r.offset >= self.log_start]

    def epoch_at(self, offset: int) -> int:
        found = -1
        for epoch, start in self.epochs:
            if start <= offset:
                found = epoch
        return found

    @property
    def highest_tiered(self) -> int:
        """The copier tiers rolled segments whose last offset is below the high watermark, in order,
        from the one holding the log start offset on."""
        highest = -1
        for _, last in self.segments[:-1]:
            if last >= self.high_watermark:
                break
            highest = last
        return highest if highest >= self.log_start else -1

    def tiered_segments(self) -> list[tuple[int, int]]:
        return [s for s in self.segments[:-1] if self.log_start <= s[1] <= self.highest_tiered]

    def for_timestamp(self, timestamp: int) -> Answer:
        for r in self.visible():
            if r.timestamp >= timestamp:
                return NOTHING if r.offset >= self.high_watermark else (r.offset, r.timestamp, r.leader_epoch)
        return NOTHING

    def special(self, timestamp: int) -> Answer:
        if timestamp == -1:
            return (self.high_watermark, -1, self.epochs[-1][0] if self.epochs else -1)
        if timestamp == -2:
            return (self.log_start, -1, self.epoch_at(self.log_start))
        if timestamp == -3:
            visible = self.visible()
            best = max(r.timestamp for r in visible)
            first = next(r for r in visible if r.timestamp == best)
            return (
                NOTHING if first.offset >= self.high_watermark else (first.offset, best, first.leader_epoch)
            )
        if timestamp == -4:
            start = max(self.local_start, self.log_start)
            return (start, -1, self.epoch_at(start))
        if timestamp == -5:
            highest = self.highest_tiered
            return NOTHING if highest < 0 else (highest, -1, self.epoch_at(highest))
        raise ValueError(timestamp)

    def answer(self, timestamp: int) -> Answer:
        return self.special(timestamp) if timestamp < 0 else self.for_timestamp(timestamp)

    def tier(self, timestamp: int) -> str | None:
        """Where a found record lives: only remotely below the first local offset."""
        found = self.for_timestamp(timestamp)
        if found == NOTHING:
            return None
        return "remote" if found[0] < self.local_start else "local"

    def batches_of_fetch(self, offset: int, next_offset: int) -> list[Batch]:
        """The stored batches from the one holding ``offset`` to the one ending at ``next_offset - 1``."""
        chosen = [b for b in self.batches if b.last >= offset and b.first < next_offset]
        assert chosen, f"no batch of {self.topic}-{self.partition} holds {offset}"
        assert chosen[0].first <= offset, f"offset {offset} falls between batches"
        assert chosen[-1].last == next_offset - 1, f"next offset {next_offset} is not a batch boundary"
        return chosen

    def targets(self, rnd: random.Random) -> list[int]:
        """Timestamps around the edges (log start, first local offset, last tiered offset, high
        watermark, segment boundaries), a sample of the others, the extremes."""
        records = list(self.records)
        stamps = sorted({r.timestamp for r in records})
        edges = {self.log_start, self.local_start, self.highest_tiered, self.high_watermark}
        edges |= {offset for segment in self.segments for offset in segment}
        near = {
            r.timestamp + d for r in records if any(abs(r.offset - e) <= 1 for e in edges) for d in (-1, 0, 1)
        }
        others = sorted({t + d for t in stamps for d in (-1, 0, 1)} - near)
        sampled = rnd.sample(others, min(SAMPLED_TARGETS, len(others)))
        return sorted({0, stamps[0] - 1, stamps[-1], stamps[-1] + 1, 2**62, *near, *sampled})


def _batch_chunks(data: bytes) -> Iterator[bytes]:
    """Split a ``.log`` file into batches: base offset (int64), length (int32), then ``length`` bytes."""
    position = 0
    while position + 12 <= len(data):
        (length,) = struct.unpack_from(">i", data, position + 8)
        end = position + 12 + length
        if end > len(data):
            return
        yield data[position:end]
        position = end


def _read_batch(chunk: bytes) -> Batch:
    batch: Any = MemoryRecords(chunk).next_batch()
    assert batch.validate_crc()
    control = bool(getattr(batch, "is_control_batch", False))
    epoch = batch.leader_epoch if batch.magic == 2 else -1
    records = tuple(
        OracleRecord(
            offset=r.offset,
            timestamp=r.timestamp,
            timestamp_type="LogAppendTime" if r.timestamp_type == 1 else "CreateTime",
            leader_epoch=epoch,
            control=control,
            key=r.key,
            value=r.value,
            headers=tuple((k, v) for k, v in getattr(r, "headers", ())),
        )
        for r in batch
    )
    return Batch(records[0].offset, records[-1].offset, chunk, records)


def read_oracle(log_dir: Path, topic: str, partition: int) -> Oracle:
    directory = log_dir / f"{topic}-{partition}"
    batches: list[Batch] = []
    segments = []
    for log in sorted(directory.glob("*.log")):
        found = [_read_batch(chunk) for chunk in _batch_chunks(log.read_bytes())]
        base = int(log.stem)
        segments.append((base, found[-1].last if found else base - 1))
        batches.extend(found)
    epochs = [
        (e.epoch, e.start_offset) for e in read_leader_epoch_checkpoint(directory / "leader-epoch-checkpoint")
    ]
    hw = read_offset_checkpoint(log_dir / REPLICATION_OFFSET_CHECKPOINT)[(topic, partition)]
    log_start = read_offset_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT).get((topic, partition), 0)
    return Oracle(topic, partition, batches, segments, epochs, hw, log_start, segments[0][0])


# -- the log directories ------------------------------------------------------------------------

_KINDS: tuple[BatchKind, ...] = ("plain", "commit", "plain", "abort", "plain")
#: orders-0 (second log dir): out-of-order CreateTime, transactions, three leader changes, small
#: segments, the high watermark below the log end.
ORDERS_PLAN = PartitionPlan(
    batches=tuple(
        BatchPlan(
            timestamps=(i * 150, i * 150 + 2_000, i * 150 + 40, i * 150 + 90),
            codec=tuple(Codec)[i % len(Codec)],
            kind=_KINDS[i % len(_KINDS)],
            new_epoch=i % 25 == 24,
            value_bytes=80,
        )
        for i in range(90)
    ),
    segment_bytes=6000,
    index_interval_bytes=400,
    high_watermark_at=0.9,
)
#: payments (CreateTime, legacy v1 batches first) and clicks (LogAppendTime), two partitions each.
PRODUCE_SPEC = ProduceSpec(
    topics=2,
    partitions=2,
    records=2500,
    segment_bytes=48 * 1024,
    max_batch_records=40,
    legacy_batches=6,
    seed=23,
    topic_names=("payments", "clicks"),
)


@dataclass
class Cluster:
    """The broker's log directories as rlm serves them, and a pristine copy for the oracle."""

    log_dirs: tuple[Path, Path]
    pristine: tuple[Path, Path]
    partitions: dict[tuple[str, int], int]
    """Partition → index of its log directory."""


def _multi_record_batch_after(log_dir: Path, topic: str, partition: int, segment_index: int) -> int:
    """An offset inside (not at the start of) a batch of the given segment."""
    oracle = read_oracle(log_dir, topic, partition)
    base, last = oracle.segments[segment_index]
    batch = next(b for b in oracle.batches if base <= b.first and b.last <= last and b.last - b.first >= 2)
    return batch.first + 1


def build_cluster(root: Path) -> Cluster:
    first, second = root / "logs-a", root / "logs-b"
    produce(first, PRODUCE_SPEC)
    write_partition(second, ORDERS_PLAN)
    meta = first / "meta.properties"  # both directories are broker BROKER_ID's
    write_meta_properties(meta, {**read_meta_properties(meta), "node.id": str(BROKER_ID)})
    # DeleteRecords moved payments-1's log start offset into a batch of its second segment.
    starts = first / LOG_START_OFFSET_CHECKPOINT
    write_offset_checkpoint(
        starts,
        {
            **read_offset_checkpoint(starts),
            ("payments", 1): _multi_record_batch_after(first, "payments", 1, 1),
        },
    )
    # clicks-0's followers lag: the high watermark is in the last rolled segment, which must stay local.
    hws = first / REPLICATION_OFFSET_CHECKPOINT
    clicks = read_oracle(first, "clicks", 0)
    base, last = clicks.segments[-2]
    middle = next(b.first for b in clicks.batches if b.first > (base + last) // 2)
    write_offset_checkpoint(hws, {**read_offset_checkpoint(hws), ("clicks", 0): middle})
    pristine = (root / "pristine-a", root / "pristine-b")
    for source, copy in zip((first, second), pristine, strict=True):
        shutil.copytree(source, copy)
    partitions = {(t, p): 0 for t in ("payments", "clicks") for p in (0, 1)}
    partitions[("orders", 0)] = 1
    return Cluster((first, second), pristine, partitions)


#: Local retention after tiering: the share of each partition's tiered segments deleted locally.
LOCALLY_DELETED = {("payments", 0): 0.5, ("payments", 1): 1.0, ("clicks", 1): 1.0, ("orders", 0): 0.8}


def delete_tiered_segments(cluster: Cluster, oracles: dict[tuple[str, int], Oracle]) -> None:
    """Delete the oldest tiered segments (and those below the log start offset) as the broker's
    local retention does; the oracles learn the new first local offset."""
    for tp, share in LOCALLY_DELETED.items():
        oracle = oracles[tp]
        directory = cluster.log_dirs[cluster.partitions[tp]] / f"{tp[0]}-{tp[1]}"
        tiered = oracle.tiered_segments()
        doomed = [s for s in oracle.segments if s[1] < oracle.log_start]
        doomed += tiered[: max(1, round(share * len(tiered)))]
        for base, _ in doomed:
            for suffix in (".log", ".index", ".timeindex", ".txnindex"):
                (directory / f"{base:020d}{suffix}").unlink(missing_ok=True)
        oracle.local_start = next(s[0] for s in oracle.segments if s not in doomed)


# -- the server ---------------------------------------------------------------------------------


def serve_settings(cluster: Cluster, root: Path, url: str, bucket: str, moto: MotoS3) -> dict[str, Any]:
    return {
        "log.dirs": [str(d) for d in cluster.log_dirs],
        "broker.id": BROKER_ID,
        "metadata.url": url,
        "remote.url": f"s3://{bucket}/tier",
        "s3.endpoint.url": moto.endpoint_url,
        "remote.log.index.cache.dir": str(root / "index-cache"),
        "remote.log.manager.task.interval.ms": 200,
        "auth.tokens": f"read:{READ_TOKEN},admin:{ADMIN_TOKEN}",
        "topics": {"defaults": {"retention.ms": -1}},
    }


AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "rlm-test-key",
    "AWS_SECRET_ACCESS_KEY": "rlm-test-secret",
    "AWS_DEFAULT_REGION": REGION,
}


def partitions_overview(served: ServeProcess) -> dict[tuple[str, int], dict[str, Any]]:
    with served.client(headers=bearer(READ_TOKEN)) as client:
        response = client.get("/v1/topics")
    assert response.status_code == 200, response.text
    return {(t["name"], p["partition"]): p for t in response.json()["topics"] for p in t["partitions"]}


def wait_until_tiered(served: ServeProcess, oracles: dict[tuple[str, int], Oracle]) -> None:
    expected = {tp: o.highest_tiered for tp, o in oracles.items()}
    deadline = datetime.datetime.now() + datetime.timedelta(seconds=TIERING_TIMEOUT_S)
    while True:
        overview = partitions_overview(served)
        got = {tp: overview[tp]["highest_tiered_offset"] if tp in overview else None for tp in expected}
        if got == expected:
            return
        if datetime.datetime.now() > deadline:
            pytest.fail(f"not tiered in time: {got} != {expected}\n{served.log_text()}")
        assert served.process.poll() is None, served.log_text()
        time.sleep(0.1)


def segment_states(url: str) -> list[str]:
    engine = create_engine_for_url(url, pooled=False)
    try:
        with engine.connect() as conn:
            return [row[0] for row in conn.execute(select(SegmentRow.state))]
    finally:
        engine.dispose()


@pytest.fixture
def database() -> Iterator[str]:
    url = create_postgres_database()
    try:
        upgrade_schema(url)
        yield url
    finally:
        drop_postgres_database(url)


# -- checks -------------------------------------------------------------------------------------


def _iso(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).isoformat(timespec="milliseconds")


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def check_rest_lookups(client: Any, oracle: Oracle, targets: Sequence[int]) -> set[str | None]:
    path = f"/v1/topics/{oracle.topic}/partitions/{oracle.partition}/offsets"
    asked = [(str(t), t) for t in targets]
    asked += [(str(t), t) for t in SPECIALS] + [(name, t) for t, name in SPECIALS.items()]
    asked += [(_iso(t), t) for t in targets[1:-1:7]]  # ISO-8601 with milliseconds
    tiers = set()
    for text, timestamp in asked:
        response = client.get(path, params={"timestamp": text})
        assert response.status_code == 200, (text, response.text)
        body = response.json()
        got = (body["offset"], body["timestamp"], body["leader_epoch"])
        assert got == oracle.answer(timestamp), f"{oracle.topic}-{oracle.partition} at {text}"
        assert (body["topic"], body["partition"]) == (oracle.topic, oracle.partition)
        if timestamp >= 0:
            assert body["tier"] == oracle.tier(timestamp), f"{oracle.topic}-{oracle.partition} at {text}"
            tiers.add(body["tier"])
    return tiers


def check_grpc_lookups(
    stub: rlm_pb2_grpc.RemoteLogManagerStub, oracle: Oracle, targets: Sequence[int]
) -> None:
    tier_names = {pb.TIER_UNSPECIFIED: None, pb.TIER_LOCAL: "local", pb.TIER_REMOTE: "remote"}
    for timestamp in [*targets, *SPECIALS]:
        got = stub.GetOffset(
            pb.GetOffsetRequest(topic=oracle.topic, partition=oracle.partition, timestamp=str(timestamp)),
            metadata=READ_METADATA,
            timeout=30,
        )
        assert (got.offset, got.timestamp, got.leader_epoch) == oracle.answer(timestamp), timestamp
        if timestamp >= 0:
            assert tier_names[got.tier] == oracle.tier(timestamp), timestamp


def _list_offsets_rounds(
    targets: dict[tuple[str, int], list[int]],
) -> list[dict[str, list[tuple[int, int]]]]:
    """Requests asking every partition once (Kafka refuses a partition asked twice), until every
    target and special value of every partition was asked; the first also names an unknown one."""
    asked = {tp: [*stamps, *SPECIALS] for tp, stamps in targets.items()}
    rounds = []
    for i in range(max(len(stamps) for stamps in asked.values())):
        request: dict[str, list[tuple[int, int]]] = {}
        for (topic, partition), stamps in asked.items():
            if i < len(stamps):
                request.setdefault(topic, []).append((partition, stamps[i]))
        rounds.append(request)
    rounds[0]["payments"].append((7, 0))
    rounds[0]["no-such-topic"] = [(0, -1)]
    return rounds


def check_list_offsets(
    client: Any,
    stub: rlm_pb2_grpc.RemoteLogManagerStub,
    oracles: dict[tuple[str, int], Oracle],
    targets: dict[tuple[str, int], list[int]],
) -> None:
    """Kafka-shaped requests for every partition and target, over REST and over gRPC."""
    for by_topic in _list_offsets_rounds(targets):
        body = {
            "topics": [
                {"name": name, "partitions": [{"partition_index": p, "timestamp": t} for p, t in asked]}
                for name, asked in by_topic.items()
            ]
        }
        response = client.post("/v1/list-offsets", json=body)
        assert response.status_code == 200, response.text
        reply = stub.ListOffsets(
            pb.ListOffsetsRequest(
                topics=[
                    pb.ListOffsetsTopic(
                        name=name,
                        partitions=[
                            pb.ListOffsetsPartition(partition_index=p, timestamp=t) for p, t in asked
                        ],
                    )
                    for name, asked in by_topic.items()
                ]
            ),
            metadata=READ_METADATA,
            timeout=60,
        )
        rest_topics = response.json()["topics"]
        assert [t["name"] for t in rest_topics] == [t.name for t in reply.topics] == list(by_topic)
        for (name, asked), rest_topic, grpc_topic in zip(
            by_topic.items(), rest_topics, reply.topics, strict=True
        ):
            answers = zip(asked, rest_topic["partitions"], grpc_topic.partitions, strict=True)
            for (partition, timestamp), got_rest, got_grpc in answers:
                assert got_rest["partition_index"] == got_grpc.partition_index == partition
                if (name, partition) not in oracles:
                    assert got_rest["error_code"] == got_grpc.error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
                    continue
                want = oracles[(name, partition)].answer(timestamp)
                assert got_rest["error_code"] == got_grpc.error_code == 0, got_rest
                assert (got_rest["offset"], got_rest["timestamp"], got_rest["leader_epoch"]) == want
                assert (got_grpc.offset, got_grpc.timestamp, got_grpc.leader_epoch) == want
    twice = {
        "topics": [
            {"name": "payments", "partitions": [{"partition_index": 0, "timestamp": t} for t in (0, -1)]}
        ]
    }
    [[first, second]] = [
        t["partitions"] for t in client.post("/v1/list-offsets", json=twice).json()["topics"]
    ]
    assert first["error_code"] == second["error_code"] == 42  # INVALID_REQUEST


def fetch_offsets(oracle: Oracle) -> list[int]:
    """Offsets to read from: the log start (mid-batch for payments-1), the last remote-only offset,
    the first local one, one in the middle, the last below the high watermark."""
    chosen = {oracle.log_start, oracle.local_start - 1, oracle.local_start, oracle.high_watermark - 1}
    chosen.add((oracle.log_start + oracle.high_watermark) // 2)
    return sorted(o for o in chosen if oracle.log_start <= o < oracle.high_watermark)


def check_rest_fetches(client: Any, oracle: Oracle) -> None:
    path = f"/v1/topics/{oracle.topic}/partitions/{oracle.partition}/records"
    for offset in fetch_offsets(oracle):
        params = {"offset": offset, "max_bytes": FETCH_MAX_BYTES}
        raw = client.get(path, params=params, headers={"Accept": "application/octet-stream"})
        assert raw.status_code == 200, raw.text
        tier = "remote" if offset < oracle.local_start else "local"
        assert raw.headers["x-rlm-tier"] == tier
        assert int(raw.headers["x-rlm-high-watermark"]) == oracle.high_watermark
        decoded = client.get(path, params=params)
        assert decoded.status_code == 200, decoded.text
        body = decoded.json()
        assert (body["tier"], body["high_watermark"]) == (tier, oracle.high_watermark)
        # The batches read, whole; transaction markers (control batches) are not returned.
        stored = [b for b in oracle.batches_of_fetch(offset, body["next_offset"]) if not b.records[0].control]
        parsed = MemoryRecords(raw.content)
        while parsed.has_next():
            batch = parsed.next_batch()
            if batch is None:
                break
            assert batch.validate_crc() and not getattr(batch, "is_control_batch", False)
        assert raw.content == b"".join(b.data for b in stored), (
            f"{oracle.topic}-{oracle.partition} @ {offset}"
        )
        want = [
            {
                "offset": r.offset,
                "timestamp": r.timestamp,
                "timestamp_type": r.timestamp_type,
                "key": _b64(r.key),
                "value": _b64(r.value),
                "headers": [[k, _b64(v)] for k, v in r.headers],
                "leader_epoch": r.leader_epoch,
            }
            for b in stored
            for r in b.records
            if not r.control and offset <= r.offset < oracle.high_watermark
        ]
        assert body["records"] == want, f"{oracle.topic}-{oracle.partition} @ {offset}"


def check_grpc_fetch(stub: rlm_pb2_grpc.RemoteLogManagerStub, oracle: Oracle) -> None:
    for offset in (oracle.log_start, oracle.local_start):
        got = stub.FetchRecords(
            pb.FetchRecordsRequest(
                topic=oracle.topic, partition=oracle.partition, offset=offset, max_bytes=FETCH_MAX_BYTES
            ),
            metadata=READ_METADATA,
            timeout=30,
        )
        stored = [b for b in oracle.batches_of_fetch(offset, got.next_offset) if not b.records[0].control]
        assert got.raw_batches == b"".join(b.data for b in stored)
        want = [
            (r.offset, r.timestamp, r.key, r.value, [(k, v) for k, v in r.headers])
            for b in stored
            for r in b.records
            if not r.control and offset <= r.offset < oracle.high_watermark
        ]
        assert [
            (
                r.offset,
                r.timestamp,
                r.key if r.HasField("key") else None,
                r.value if r.HasField("value") else None,
                [(h.key, h.value if h.HasField("value") else None) for h in r.headers],
            )
            for r in got.records
        ] == want


# -- the scenarios ------------------------------------------------------------------------------


def test_serve_answers_every_lookup_and_fetch_like_the_oracle_then_stops_on_sigterm(
    tmp_path: Path,
    moto_s3: MotoS3,
    database: str,
) -> None:
    cluster = build_cluster(tmp_path)
    bucket = moto_s3.new_bucket()
    served = start_serve(tmp_path, serve_settings(cluster, tmp_path, database, bucket, moto_s3), env=AWS_ENV)
    try:
        oracles = {tp: read_oracle(cluster.pristine[index], *tp) for tp, index in cluster.partitions.items()}
        wait_until_tiered(served, oracles)
        delete_tiered_segments(cluster, oracles)
        overview = partitions_overview(served)
        for tp, oracle in oracles.items():
            assert overview[tp]["tiered_segments"] == len(oracle.tiered_segments()), tp
            assert overview[tp]["local_log_start_offset"] == oracle.local_start, tp
            assert overview[tp]["high_watermark"] == oracle.high_watermark, tp
            assert overview[tp]["copy_lag_segments"] == 0, tp

        rnd = random.Random(5)
        targets = {tp: oracle.targets(rnd) for tp, oracle in oracles.items()}
        tiers: set[str | None] = set()
        with (
            served.client(headers=bearer(READ_TOKEN)) as client,
            grpc.insecure_channel(served.grpc_target) as channel,
        ):
            stub = rlm_pb2_grpc.RemoteLogManagerStub(channel)
            for tp, oracle in oracles.items():
                tiers |= check_rest_lookups(client, oracle, targets[tp])
                check_grpc_lookups(stub, oracle, targets[tp])
                check_rest_fetches(client, oracle)
                check_grpc_fetch(stub, oracle)
            check_list_offsets(client, stub, oracles, targets)
        assert tiers == {"remote", "local", None}
    finally:
        code = served.terminate()
    assert code == 0, served.log_text()
    log = served.log_text()
    assert '"message": "stopped"' in log
    assert READ_TOKEN not in log and ADMIN_TOKEN not in log
    states = segment_states(database)
    assert states and set(states) == {SegmentState.COPY_SEGMENT_FINISHED.value}


def test_sigterm_during_copies_stops_gracefully_and_a_restart_tiers_the_rest(
    tmp_path: Path,
    moto_s3: MotoS3,
    database: str,
) -> None:
    cluster = build_cluster(tmp_path)
    bucket = moto_s3.new_bucket()
    settings = serve_settings(cluster, tmp_path, database, bucket, moto_s3)
    # Slow uploads, so that copies are in flight when SIGTERM comes.
    slow = start_serve(
        tmp_path,
        {**settings, "remote.log.manager.copy.max.bytes.per.second": 100_000},
        env=AWS_ENV,
        name="slow",
    )
    try:
        deadline = datetime.datetime.now() + datetime.timedelta(seconds=TIERING_TIMEOUT_S)
        while sum(p["tiered_segments"] for p in partitions_overview(slow).values()) == 0:
            assert datetime.datetime.now() < deadline, slow.log_text()
            time.sleep(0.05)
    finally:
        code = slow.terminate()
    assert code == 0, slow.log_text()
    states = segment_states(database)
    # Whatever was in flight was finished: no copy is left half done, unless the pass overran the
    # stop deadline (a heavily loaded machine), which the log says and the restart below cleans up.
    log = slow.log_text()
    if "did not finish in time" not in log:
        assert SegmentState.COPY_SEGMENT_STARTED.value not in states, log
    oracles = {tp: read_oracle(cluster.pristine[index], *tp) for tp, index in cluster.partitions.items()}
    assert 0 < len(states) <= sum(len(o.tiered_segments()) for o in oracles.values())

    again = start_serve(tmp_path, settings, env=AWS_ENV, name="again")
    try:
        wait_until_tiered(again, oracles)
    finally:
        assert again.terminate() == 0, again.log_text()
    # Copies cut short (see above) were cleaned up: DELETE_SEGMENT_FINISHED, with no objects left.
    states = [s for s in segment_states(database) if s != SegmentState.DELETE_SEGMENT_FINISHED.value]
    assert states == [SegmentState.COPY_SEGMENT_FINISHED.value] * sum(
        len(o.tiered_segments()) for o in oracles.values()
    )
    # Every object in the bucket belongs to a finished segment: nothing half-uploaded was left behind.
    keys = {o["Key"] for o in moto_s3.client().list_objects_v2(Bucket=bucket).get("Contents", [])}
    assert len(keys) == 2 * len(states)
