"""Reads across a diverged copy kept past its cut, on SQLite + filesystem and PostgreSQL + S3.

After an unclean leader election a diverged copy that also holds offsets the broker deleted is
trimmed to them, and its batch holding offsets on both sides of the cut is kept whole
(:mod:`rlm.tiering.trim`): its records past the cut are the old leader's. Every read (a bounded
fetch, streams of records and of raw batches, over REST and gRPC, offset-for-timestamp lookups)
gives that batch out cut short at the cut, and goes on from there with the broker's log, then its
copy.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

import grpc
import pyarrow as pa
import pytest
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry

from api.auth import TokenAuthenticator
from api.gen.rlm.v1 import rlm_pb2 as pb
from api.gen.rlm.v1 import rlm_pb2_grpc
from api.grpc_server import build_grpc_server
from api.rest.app import create_app
from rlm.bootstrap import build_runtime
from rlm.config import Settings
from rlm.log.logdir import LogDir
from rlm.lookup import answer_end
from tests.grpc_support import ServerThread, free_port
from tests.lookup_support import parse_with_kafka_python
from tests.retired_support import rebuilt_from_objects
from tests.tiering_support import WRITER_NOW_MS, Backend, Tiering, set_log_start_offsets
from tests.unclean_election_support import (
    TP,
    drop_local_segments_below,
    elected_past_the_cut,
    fetched,
    new_leaders_from,
    spans,
    write_log,
)

TieringFactory = Callable[..., Tiering]


def waiting_past_the_cut(
    backend: Backend, tiering_factory: TieringFactory, tmp_path: Path
) -> tuple[Tiering, Path]:
    """:func:`elected_past_the_cut` and a copier pass: the copy of 20..29 is kept whole, and the
    copy past the cut waits for the broker's segment after 25..27 to roll."""
    tiering, log_dir = elected_past_the_cut(backend, tiering_factory, tmp_path)
    tiering.copier().run_once()
    return tiering, log_dir


def joined_past_the_cut(tiering: Tiering, log_dir: Path, peaks: Mapping[int, int] | None = None) -> None:
    """The broker's segment rolled at 35: the copy of 25..34 made, then deleted locally (it answers
    remotely from 25 on). ``peaks``: the largest timestamps of the broker's segments, as
    :func:`~tests.unclean_election_support.plans` takes them."""
    write_log(log_dir, (10, 4), (10, 4), (5, 6), (3, 6), (7, 6), peaks=peaks)
    drop_local_segments_below(log_dir, 25)
    assert tiering.copier().run_once()[0].copied_segments == 1
    drop_local_segments_below(log_dir, 35)


def test_a_fetch_of_a_copy_kept_past_the_cut_answers_its_records_below_the_cut_then_the_brokers(
    backend: Backend, tiering_factory: TieringFactory, tmp_path: Path
) -> None:
    """The kept copy's batch 20..29 holds the old leader's 25..29: a fetch below the cut gives 20..24
    of it and sends the next fetch to 25, where the new leader's records are, both while the copy
    past the cut waits and once it is made."""
    tiering, log_dir = waiting_past_the_cut(backend, tiering_factory, tmp_path)
    assert spans(tiering) == [(0, 9, (4,)), (10, 19, (4,)), (20, 29, (5,))]

    waiting = fetched(tiering, log_dir, [20, 24, 25])
    assert waiting[20] == ("remote", 25, [(o, 5) for o in range(20, 25)])
    assert waiting[24] == ("remote", 25, [(24, 5)])
    tier, next_offset, records = waiting[25]
    assert tier == "local" and next_offset > 25 and records == new_leaders_from(25, next_offset - 1)

    joined_past_the_cut(tiering, log_dir)
    joined = fetched(tiering, log_dir, [22, 25, 29])
    assert joined[22] == ("remote", 25, [(o, 5) for o in range(22, 25)])
    assert joined[25] == ("remote", 35, new_leaders_from(25, 34))
    assert joined[29] == ("remote", 35, new_leaders_from(29, 34))


def streamed(tiering: Tiering, log_dir: Path, params: dict[str, int]) -> dict[str, list[tuple[int, int]]]:
    """The range of ``params`` streamed over REST as NDJSON and Arrow records, and as raw batches
    read by kafka-python (``raw``: all their records; ``raw_in_range``: those the range holds),
    offsets and leader epochs; the raw batches' first and last offsets (``batches``). The log
    start offset is put at 0."""
    set_log_start_offsets(log_dir, {TP: 0})
    settings = tiering.settings.replace(auth_enabled=False)
    rt = build_runtime(settings, registry=CollectorRegistry(), storage=tiering.storage)
    path = f"/v1/topics/{TP.topic}/partitions/{TP.partition}/records"
    try:
        app = create_app(settings, runtime_=rt)
        with TestClient(app) as client:
            answers = {
                media: client.get(path, params=params, headers={"Accept": media})
                for media in (
                    "application/x-ndjson",
                    "application/vnd.apache.arrow.stream",
                    "application/octet-stream",
                )
            }
    finally:
        rt.close()
    grpc_answers = read_records(tiering, settings, params)
    assert all(answer.status_code == 200 for answer in answers.values())
    lines = [json.loads(line) for line in answers["application/x-ndjson"].text.splitlines()]
    table = pa.ipc.open_stream(answers["application/vnd.apache.arrow.stream"].content).read_all()
    parsed = parse_with_kafka_python(answers["application/octet-stream"].content)
    raw = [(r.offset, batch.leader_epoch) for batch in parsed for r in batch.records]
    end = params.get("end_offset", 2**63)
    return {
        "ndjson": [(line["offset"], line["leader_epoch"]) for line in lines],
        "arrow": list(zip(table["offset"].to_pylist(), table["leader_epoch"].to_pylist(), strict=True)),
        "raw": raw,
        "raw_in_range": [(o, epoch) for o, epoch in raw if params["offset"] <= o < end],
        "batches": [(batch.base_offset, batch.last_offset) for batch in parsed],
        **grpc_answers,
    }


def read_records(
    tiering: Tiering, settings: Settings, params: dict[str, int]
) -> dict[str, list[tuple[int, int]]]:
    """The range of ``params`` read with gRPC ``ReadRecords``: its records (``grpc``), and its raw
    batches' records in the range (``grpc_raw``), offsets and leader epochs."""
    rt = build_runtime(settings, registry=CollectorRegistry(), storage=tiering.storage)
    port = free_port()
    authenticator = TokenAuthenticator.from_settings(settings)
    server = ServerThread(lambda: build_grpc_server(rt, authenticator, port=port))
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    start, end = params["offset"], params["end_offset"]
    try:
        stub = rlm_pb2_grpc.RemoteLogManagerStub(channel)
        answers: dict[str, list[tuple[int, int]]] = {"grpc": [], "grpc_raw": []}
        for raw in (False, True):
            request = pb.ReadRecordsRequest(topic=TP.topic, raw=raw, offset=start, end_offset=end)
            for message in stub.ReadRecords(request, timeout=30):
                if raw:
                    answers["grpc_raw"] += [
                        (r.offset, batch.leader_epoch)
                        for batch in parse_with_kafka_python(message.raw_batches)
                        for r in batch.records
                        if start <= r.offset < end
                    ]
                else:
                    answers["grpc"] += [(r.offset, r.leader_epoch) for r in message.records]
        return answers
    finally:
        channel.close()
        asyncio.run_coroutine_threadsafe(rt.streams.remote.close(), server.loop).result(10)
        server.stop()
        rt.close()


def test_a_stream_across_a_copy_kept_past_the_cut_sends_its_records_below_the_cut_then_the_brokers(
    backend: Backend, tiering_factory: TieringFactory, tmp_path: Path
) -> None:
    """Records streamed from the kept copy's batch 20..29 stop at the cut; the new leader's 25.. follow
    from the broker's log while the copy past the cut waits, and from that copy once it is made.
    Raw batches alike: the kept batch is sent cut short at 24, then the broker's batches follow, no
    offset sent twice. gRPC ReadRecords, records and raw batches, the same."""
    tiering, log_dir = waiting_past_the_cut(backend, tiering_factory, tmp_path)

    waiting = streamed(tiering, log_dir, {"offset": 12, "end_offset": 28})
    expected = [(o, 4) for o in range(12, 20)] + [(o, 5) for o in range(20, 25)] + new_leaders_from(25, 27)
    assert waiting["ndjson"] == waiting["arrow"] == waiting["raw_in_range"] == expected
    assert waiting["grpc"] == waiting["grpc_raw"] == expected
    assert waiting["batches"][:2] == [(10, 19), (20, 24)]

    joined_past_the_cut(tiering, log_dir)
    hw = LogDir(log_dir).partition(TP.topic, TP.partition).high_watermark()
    assert hw is not None and hw > 35
    for params, first, last in (
        ({"offset": 22, "end_offset": hw + 5}, 22, hw - 1),
        ({"offset": 21, "end_offset": 27}, 21, 26),
    ):
        joined = streamed(tiering, log_dir, params)
        expected = [(o, 5) for o in range(first, 25)] + new_leaders_from(25, last)
        assert joined["ndjson"] == joined["arrow"] == joined["raw_in_range"] == expected, params
        assert joined["grpc"] == joined["grpc_raw"] == expected, params
        assert joined["batches"][0] == (20, 24)
        offsets = [o for o, _ in joined["raw"]]
        assert offsets == sorted(set(offsets)), "no offset sent twice"
        assert all(before[1] < after[0] for before, after in itertools.pairwise(joined["batches"]))


def test_a_kept_batch_whose_old_leaders_records_reach_the_high_watermark_is_read_below_the_cut(
    backend: Backend, tiering_factory: TieringFactory, tmp_path: Path
) -> None:
    """The new leader has written little past the cut: its high watermark (29) is the kept batch
    20..29's last offset, the old leader's. Cut at 24 the batch lies below it: a fetch from 20
    answers 20..24 (not nothing, the next fetch sent back to 20), and a stream sends them, then
    the broker's 25..28 (it does not end at 19)."""
    tiering, log_dir = elected_past_the_cut(backend, tiering_factory, tmp_path, past_the_cut=1)
    tiering.copier().run_once()
    assert spans(tiering) == [(0, 9, (4,)), (10, 19, (4,)), (20, 29, (5,))]
    assert LogDir(log_dir).partition(TP.topic, TP.partition).high_watermark() == 29

    answers = fetched(tiering, log_dir, [20, 25])
    assert answers[20] == ("remote", 25, [(o, 5) for o in range(20, 25)])
    assert answers[25] == ("local", 29, new_leaders_from(25, 28))

    got = streamed(tiering, log_dir, {"offset": 12, "end_offset": 40})
    expected = [(o, 4) for o in range(12, 20)] + [(o, 5) for o in range(20, 25)] + new_leaders_from(25, 28)
    assert got["ndjson"] == got["arrow"] == got["raw_in_range"] == expected
    assert got["grpc"] == got["grpc_raw"] == expected
    assert got["batches"][:2] == [(10, 19), (20, 24)]


def test_a_copy_the_store_has_answer_an_offset_is_read_from_there_whatever_its_answer_end_says(
    backend: Backend, tiering_factory: TieringFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Should the last answered offset ever lie below the offset the store has a copy answer, the
    copy is read as the store says: a stream goes on (it would ask for the same copy forever) and
    a fetch answers records (it would answer none)."""
    tiering, log_dir = waiting_past_the_cut(backend, tiering_factory, tmp_path)
    monkeypatch.setattr(answer_end, "remote_answer_end", lambda *_: -1)

    answers: list[dict[str, list[tuple[int, int]]]] = []
    # On a daemon thread: a stream asking for the same copy forever fails the test, not hangs it.
    stream = threading.Thread(
        target=lambda: answers.append(streamed(tiering, log_dir, {"offset": 12, "end_offset": 28})),
        daemon=True,
    )
    stream.start()
    stream.join(60)
    assert answers, "the stream did not end"
    assert [offset for offset, _ in answers[0]["ndjson"]] == list(range(12, 28))
    assert fetched(tiering, log_dir, [20])[20] == ("remote", 30, [(o, 5) for o in range(20, 30)])


@pytest.mark.parametrize("state", ["waiting", "crashed", "joined"])
def test_a_store_rebuilt_right_after_a_trim_reads_as_the_copiers_and_deletes_none_of_its_copies(
    backend: Backend,
    tiering_factory: TieringFactory,
    tmp_path: Path,
    sqlite_template: Path,
    state: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``rlm spark rebuild-metadata --delete-orphans`` run after a trim. The copier pass that trims
    deletes the copies it retired (the old leader's copies of 20..39 and 40..49) at once, so a
    rebuild while the copy past the cut waits, or once it is made, gives the copier's store.

    A copier that dies after the store retired them and before their objects go (``crashed``)
    leaves them for the next pass's cleanup. Their objects were marked retired before the store
    retired them, so a rebuild in between leaves them out too: they are orphans, deleted, and
    never answer the old leader's records again (a trim's copy inside the range of the first
    stays, as the copier's). The next copier pass finds nothing to do again."""
    if state == "crashed":
        tiering, log_dir = elected_past_the_cut(backend, tiering_factory, tmp_path)

        def crash(step: str) -> None:
            if step == "copies_retired":
                raise OSError("the sidecar died")

        assert isinstance(tiering.copier(step=crash).run_once()[0].error, OSError)
    else:
        tiering, log_dir = waiting_past_the_cut(backend, tiering_factory, tmp_path)
    if state == "joined":
        joined_past_the_cut(tiering, log_dir)
    offsets = [20, 24, 25, 29, 30]
    before = fetched(tiering, log_dir, offsets)
    before_stream = streamed(tiering, log_dir, {"offset": 12, "end_offset": 31})
    copiers = sorted(spans(tiering))

    rebuilt, report = rebuilt_from_objects(
        tiering,
        tiering_factory,
        log_dir,
        sqlite_template,
        tmp_path / "rebuilt",
        monkeypatch,
        delete_orphans=True,
    )
    retired = [o for o in report.orphans if "was retired" in o.reason and o.deleted]
    assert len(retired) == len(report.orphans) == (2 if state == "crashed" else 0)
    assert sorted(spans(rebuilt)) == copiers

    assert fetched(rebuilt, log_dir, offsets) == before
    assert streamed(rebuilt, log_dir, {"offset": 12, "end_offset": 31}) == before_stream
    assert [(o, e) for o, e in before_stream["ndjson"] if o >= 25] == new_leaders_from(25, 30)
    assert fetched(tiering, log_dir, offsets) == before  # the copier's store lost nothing

    rebuilt.copier().run_once()
    assert sorted(set(spans(rebuilt))) == copiers
    assert fetched(rebuilt, log_dir, offsets) == before


OLD_PEAK = WRITER_NOW_MS + 60_000
"""The largest timestamp of the old leader's copy of 20..29, held by its record 25, past the cut;
its records 20..24 lie 1..5 ms below it (20 the highest), 26..29 7..10 ms below it."""
NEW_PEAK = OLD_PEAK + 10
"""The largest timestamp of the new leader's segment 25..27, held by 26; 25 lies 1 ms below it."""

Answer = tuple[int, int, int, str | None]


def elected_past_a_peak(
    backend: Backend, tiering_factory: TieringFactory, tmp_path: Path, new_peaks: Mapping[int, int]
) -> tuple[Tiering, Path]:
    """:func:`waiting_past_the_cut` with the old leader's copy of 20..29 (one batch, kept as it is)
    holding :data:`OLD_PEAK` past the cut, far above every other timestamp of the old leader's;
    ``new_peaks`` the new leader's segments' largest timestamps."""
    log_dir = tmp_path / "logs"
    write_log(log_dir, (10, 4), (10, 4), (10, 5), (10, 5), batch_records=10, peaks={2: OLD_PEAK})
    tiering = tiering_factory(backend, log_dir)
    tiering.copier().run_once()
    write_log(log_dir, (10, 4), (10, 4), (5, 6), (3, 6), peaks=new_peaks)
    drop_local_segments_below(log_dir, 25)
    tiering.copier().run_once()
    assert spans(tiering) == [(0, 9, (4,)), (10, 19, (4,)), (20, 29, (5,))]
    return tiering, log_dir


def looked_up(
    tiering: Tiering, log_dir: Path, timestamps: list[int], *, query_tier: bool = False
) -> dict[int, Answer]:
    """Each timestamp's answer (offset, timestamp, leader epoch, tier), the same from the lookup
    service, from ListOffsets on its reader pool and from REST ``GET .../offsets``, with the log
    start offset put at 0. ``query_tier``: a sidecar without the broker's log directory."""
    set_log_start_offsets(log_dir, {TP: 0})
    settings = tiering.settings.replace(auth_enabled=False)
    if query_tier:
        settings = settings.replace(log_dirs=(), remote_log_index_cache_dir=log_dir.parent / "query-cache")
    rt = build_runtime(settings, registry=CollectorRegistry(), storage=tiering.storage)
    path = f"/v1/topics/{TP.topic}/partitions/{TP.partition}/offsets"
    answers: dict[int, Answer] = {}
    try:
        with TestClient(create_app(settings, runtime_=rt)) as client:
            for timestamp in timestamps:
                found = rt.lookup.find(TP, timestamp)
                answer = (found.offset, found.timestamp, found.leader_epoch, found.tier)
                listed = rt.list_offsets.find_one(TP, timestamp)
                assert (listed.offset, listed.timestamp, listed.leader_epoch, listed.tier) == answer
                body = client.get(path, params={"timestamp": timestamp}).json()
                assert (body["offset"], body["timestamp"], body["leader_epoch"], body["tier"]) == answer
                answers[timestamp] = answer
    finally:
        rt.close()
    return answers


def test_lookups_past_the_cut_answer_the_brokers_records_not_the_old_leaders(
    backend: Backend, tiering_factory: TieringFactory, tmp_path: Path
) -> None:
    """The old leader's 25 holds the largest timestamp of all, but it is not the log's: no record
    of the log reaches it, and the largest timestamp (-3) is the old leader's 20, below the cut.
    So while the copy past the cut waits, once it is made, and on a query tier, which reads the
    copies only."""
    tiering, log_dir = elected_past_a_peak(backend, tiering_factory, tmp_path, {})
    expected = {
        OLD_PEAK: (-1, -1, -1, None),
        OLD_PEAK - 1: (20, OLD_PEAK - 1, 5, "remote"),
        -3: (20, OLD_PEAK - 1, 5, "remote"),
    }
    assert looked_up(tiering, log_dir, list(expected)) == expected

    joined_past_the_cut(tiering, log_dir)
    assert looked_up(tiering, log_dir, list(expected)) == expected
    assert looked_up(tiering, log_dir, list(expected), query_tier=True) == expected


def test_a_lookup_past_the_cut_goes_on_in_the_brokers_log_then_its_copy(
    backend: Backend, tiering_factory: TieringFactory, tmp_path: Path
) -> None:
    """The new leader's 25 lies above the old leader's peak: a timestamp between them answers the
    new leader's 25, from the broker's log while the copy past the cut waits, from that copy once
    it is made (on a query tier too); the largest timestamp is the new leader's 26."""
    new_peaks = {3: NEW_PEAK}
    tiering, log_dir = elected_past_a_peak(backend, tiering_factory, tmp_path, new_peaks)
    waiting = looked_up(tiering, log_dir, [OLD_PEAK, -3])
    assert waiting == {OLD_PEAK: (25, NEW_PEAK - 1, 6, "local"), -3: (26, NEW_PEAK, 6, "local")}

    joined_past_the_cut(tiering, log_dir, new_peaks)
    expected = {OLD_PEAK: (25, NEW_PEAK - 1, 6, "remote"), -3: (26, NEW_PEAK, 6, "remote")}
    assert looked_up(tiering, log_dir, [OLD_PEAK, -3]) == expected
    assert looked_up(tiering, log_dir, [OLD_PEAK, -3], query_tier=True) == expected
