"""Offset for timestamp across both tiers against a brute-force oracle (design: "Offset for timestamp").

Each example appends a random log (CreateTime out of order or LogAppendTime, every codec,
transactions ending in commit or abort markers, legacy v0 and v1 batches, leader changes), tiers it with
the copier, and then, as the plan says: keeps it local only, keeps both tiers, or deletes tiered
segments locally; copies ranges again as another sidecar (overlapping remote segments); lets
remote retention delete the oldest segments; moves the log start offset (DeleteRecords). Every
answer of the lookup service must equal the oracle's, computed from the appended records alone:

* T ≥ 0: the first record at or after the log start offset with a timestamp ≥ T, if it is below
  the high watermark — its offset, timestamp and its batch's leader epoch; else -1/-1/-1.
* With READ_COMMITTED, the last stable offset stands for the high watermark above (the first
  offset of a transaction whose marker is not below the high watermark).
* -1: the high watermark; -2: the log start offset; -3: the first record with the largest
  timestamp (nothing when it is at or past the high watermark); -4: the first local offset;
  -5: the highest tiered offset. Epochs of these are those that wrote the offsets, as
  ``leader-epoch-checkpoint`` gives them before local retention cuts its start (the oracle's local
  retention cuts it as a broker does); -1 for legacy records, and for an offset no tier holds
  below where the cut checkpoint starts.
"""

from __future__ import annotations

import contextlib
import random
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from rlm.log.checkpoints import EpochEntry
from rlm.log.logdir import LogDir
from rlm.lookup.list_offsets import ErrorCode, ListOffsetsRequest, PartitionQuery, TopicQuery
from rlm.lookup.plans import Answered, IsolationLevel, OffsetAnswer, Search, ViewNeeded
from rlm.lookup.stats import FetchStats
from tests.lookup_support import (
    NOTHING,
    TOPIC,
    Backend,
    BatchKind,
    BatchPlan,
    Expected,
    PartitionPlan,
    Tiered,
    partition_plans,
    runtime,
    tier_partition,
    write_partition,
)
from tests.s3_support import MotoS3

#: Timestamps asked per example, besides every special value.
TARGETS_PER_EXAMPLE = 30
#: No shrinking: the scenario is drawn from a seed mixed with the batches, so shrinking mostly
#: wanders; a failure prints the whole plan and the tier state, which reproduce it.
PHASES = (Phase.explicit, Phase.reuse, Phase.generate)


def _got(answer: OffsetAnswer) -> Expected:
    return Expected(answer.offset, answer.timestamp, answer.leader_epoch)


def _targets(tiered: Tiered, rnd: random.Random) -> list[int]:
    """Timestamps around the records near the edges (log start, local start, last tiered offset),
    a sample of the others, and the extremes."""
    truth = tiered.truth
    stamps = sorted({r.record.timestamp for r in truth.records})
    edges = (truth.log_start_offset, truth.local_start_offset, truth.highest_copied)
    near_edges = {
        r.record.timestamp + d
        for r in truth.records
        if any(abs(r.record.offset - edge) <= 3 for edge in edges)
        for d in (0, 1)
    }
    others = sorted({t + d for t in stamps for d in (-1, 0, 1)} - near_edges)
    chosen = rnd.sample(others, min(TARGETS_PER_EXAMPLE, len(others)))
    # A v0 message's -1 (no timestamp) is not a timestamp to ask for (-1 is LATEST).
    return [t for t in (0, stamps[0] - 1, stamps[-1], stamps[-1] + 1, *sorted(near_edges), *chosen) if t >= 0]


def check_against_oracle(tiered: Tiered, rnd: random.Random) -> None:
    """Ask the lookup service for every target and every special value; compare with the oracle."""
    truth, service, tp = tiered.truth, tiered.runtime.lookup, tiered.tp
    context = "; ".join(tiered.notes)
    for target in _targets(tiered, rnd):
        stats = FetchStats()
        answer = service.find(tp, target, stats=stats)
        expected = truth.for_timestamp(target)
        assert _got(answer) == expected, f"timestamp {target}: {answer} != {expected} ({context})"
        if expected == NOTHING:
            assert answer.tier is None
        elif expected.offset < truth.local_start_offset:
            assert answer.tier == "remote", f"offset {expected.offset} exists only remotely ({context})"
            assert stats.gets >= 1
        elif truth.highest_copied < 0:
            assert answer.tier == "local" and stats.gets == 0
    check_plans(tiered, random.Random(len(truth.records)))  # leaves ``rnd``'s draws as they were
    for special in (-1, -2, -3, -4, -5):
        answer = service.find(tp, special)
        expected = truth.special(special)
        assert _got(answer) == expected, f"special {special}: {answer} != {expected} ({context})"
    # READ_COMMITTED: the last stable offset instead of the high watermark.
    targets = _targets(tiered, rnd)
    for target in [-1, -3, -5, *rnd.sample(targets, min(5, len(targets)))]:
        answer = service.find(tp, target, isolation=IsolationLevel.READ_COMMITTED)
        expected = truth.special(target, True) if target < 0 else truth.for_timestamp(target, True)
        assert _got(answer) == expected, f"read committed {target}: {answer} != {expected} ({context})"
    # ListOffsets passes the isolation level on.
    committed = (
        tiered.runtime.list_offsets.handle(
            ListOffsetsRequest(
                (TopicQuery(tp.topic, (PartitionQuery(tp.partition, -1),)),), isolation_level=1
            )
        )
        .topics[0]
        .partitions[0]
    )
    assert committed.offset == truth.last_fetchable(committed=True), (committed, context)
    # The same answers come through ListOffsets, on the reader pool.
    target = rnd.choice([-3, -2, *_targets(tiered, rnd)])
    result = tiered.runtime.list_offsets.find_one(tp, target)
    assert result.error_code is ErrorCode.NONE, result.error_message
    expected = truth.special(target) if target < 0 else truth.for_timestamp(target)
    assert Expected(result.offset, result.timestamp, result.leader_epoch) == expected


def check_plans(tiered: Tiered, rnd: random.Random) -> None:
    """Each lookup is planned once: a timestamp only the local log can hold, and LATEST, are
    answered by the plan; one the remote tier may hold is a search for the reader pool, whose
    answer (the tier not decided again) is the oracle's."""
    truth, service, tp = tiered.truth, tiered.runtime.lookup, tiered.tp
    plan = service.plan(tp, 0)
    if isinstance(plan, ViewNeeded):  # the view expired since the lookups above: read it
        plan = service.plan(tp, 0, local=plan.local, view=service.remote_view(tp, plan.local))
    local = plan.local if not isinstance(plan, Answered) else service.pinned_partition(tp)
    view = service.remote_view(tp, local)
    targets = _targets(tiered, rnd)
    for target in [-1, -3, *rnd.sample(targets, min(8, len(targets)))]:
        planned = service.plan(tp, target, local=local, view=view)
        expected = truth.special(target) if target < 0 else truth.for_timestamp(target)
        remote_may_hold = view.max_timestamp is not None and (
            target == -3 or 0 <= target <= view.max_timestamp
        )
        if isinstance(planned, Answered):
            assert not remote_may_hold, f"timestamp {target} answered without searching the remote tier"
            assert planned.answer.tier != "remote"
            assert _got(planned.answer) == expected
        else:
            assert isinstance(planned, Search) and remote_may_hold and planned.reads_remote
            assert planned.view is view
            assert _got(service.search(planned)) == expected, f"search for {target}"
    assert isinstance(service.plan(tp, -1, local=local, view=view), Answered)


def run_example(backend: Backend, plan: PartitionPlan, seed: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        log_dir = root / "logs"
        truth = write_partition(log_dir, plan)
        rt = runtime(backend, root, log_dir)
        try:
            tiered = tier_partition(rt, LogDir(log_dir).partition(TOPIC, 0), truth, plan)
            check_against_oracle(tiered, random.Random(seed))
        finally:
            rt.close()


@settings(max_examples=60, deadline=None, phases=PHASES, suppress_health_check=[HealthCheck.too_slow])
@given(plan=partition_plans(), seed=st.integers(0, 2**32))
def test_sqlite_filesystem_answers_equal_the_oracle(
    sqlite_template: Path,
    plan: PartitionPlan,
    seed: int,
) -> None:
    run_example(Backend("sqlite-fs", sqlite_template=sqlite_template), plan, seed)


@pytest.mark.postgres
@settings(max_examples=8, deadline=None, phases=PHASES, suppress_health_check=[HealthCheck.too_slow])
@given(plan=partition_plans(), seed=st.integers(0, 2**32))
def test_postgres_s3_answers_equal_the_oracle(
    postgres_url: str,
    moto_s3: MotoS3,
    plan: PartitionPlan,
    seed: int,
) -> None:
    run_example(Backend("postgres-s3", postgres_url=postgres_url, s3=moto_s3), plan, seed)


def _spread(count: int, *, kind: BatchKind = "plain") -> tuple[BatchPlan, ...]:
    # Out-of-order CreateTime: each batch holds an early and a late record.
    return tuple(
        BatchPlan(timestamps=(i * 100, i * 100 + 5_000, i * 100 + 50), kind=kind, advance_ms=100)
        for i in range(count)
    )


def _new_leaders(count: int, *, at: tuple[int, ...]) -> tuple[BatchPlan, ...]:
    # Two records a batch; a new leader appends the batches numbered in ``at``.
    return tuple(BatchPlan(timestamps=(i * 100, i * 100 + 10), new_epoch=i in at) for i in range(count))


def _falling(count: int) -> tuple[BatchPlan, ...]:
    # The largest timestamps come first, each batch's first record the largest of the batch:
    # MAX_TIMESTAMP moves with the log start offset, even inside a batch.
    return tuple(BatchPlan(timestamps=(19_100 - i * 300, 19_000 - i * 300, 2_000 + i)) for i in range(count))


def _peak_past_the_start(count: int) -> tuple[BatchPlan, ...]:
    # The largest timestamp of all is the first record of batch 8, just below a log start offset
    # moved into that batch; past it, timestamps rise to a peak in batch 15, then fall.
    def stamps(i: int) -> tuple[int, ...]:
        if i == 8:
            return (19_050, 1_800, 1_790)
        base = 19_000 + i if i < 8 else 1_000 + 100 * i if i <= 15 else 500 + i
        return (base, base + 1, base - 50)

    return tuple(BatchPlan(timestamps=stamps(i)) for i in range(count))


@pytest.mark.parametrize(
    "plan",
    [
        pytest.param(PartitionPlan(_spread(20), tiering="local"), id="only-local"),
        pytest.param(PartitionPlan(_spread(20), tiering="both"), id="both-tiers"),
        pytest.param(PartitionPlan(_spread(20), tiering="remote", roll_at_end=True), id="only-remote"),
        pytest.param(
            PartitionPlan(_spread(20), tiering="remote", overlaps=((0.2, 0.5), (0.0, 1.0))), id="overlaps"
        ),
        pytest.param(
            PartitionPlan(_spread(20), tiering="both", retention_bytes_share=0.0), id="all-remote-expired"
        ),
        pytest.param(
            PartitionPlan(_spread(20), tiering="remote", local_deleted=0.3, retention_bytes_share=0.4),
            id="expired-below-local",
        ),
        pytest.param(
            PartitionPlan(_spread(20), tiering="both", log_start_at=0.37, high_watermark_at=0.8),
            id="delete-records-mid-segment",
        ),
        pytest.param(
            PartitionPlan(_spread(20), tiering="remote", log_start_at=0.37, local_deleted=1.0),
            id="delete-records-mid-remote-batch",
        ),
        pytest.param(
            PartitionPlan(_spread(12, kind="abort") + _spread(8, kind="commit"), log_append_time=True),
            id="transactions-log-append-time",
        ),
        pytest.param(
            PartitionPlan(_falling(20), tiering="both", log_start_at=0.41),
            id="max-timestamp-below-the-log-start-locally",
        ),
        pytest.param(
            PartitionPlan(_falling(20), tiering="remote", log_start_at=0.41, local_deleted=1.0),
            id="max-timestamp-below-the-log-start-remotely",
        ),
        pytest.param(
            PartitionPlan(_falling(20), tiering="remote", local_deleted=0.5, retention_bytes_share=0.6),
            id="max-timestamp-expired",
        ),
        pytest.param(
            PartitionPlan(_peak_past_the_start(20), tiering="remote", log_start_at=0.41, local_deleted=1.0),
            id="max-timestamp-peak-past-the-log-start-remotely",
        ),
        pytest.param(
            PartitionPlan(_peak_past_the_start(20), tiering="both", log_start_at=0.41),
            id="max-timestamp-peak-past-the-log-start-locally",
        ),
        pytest.param(
            PartitionPlan(_new_leaders(30, at=(5, 12, 25)), tiering="remote", local_deleted=1.0),
            id="epochs-cut-below-the-local-log",
        ),
        pytest.param(
            PartitionPlan(
                _new_leaders(30, at=(5, 12, 25)), tiering="remote", local_deleted=0.5, log_start_at=0.2
            ),
            id="epochs-cut-past-the-log-start",
        ),
        pytest.param(PartitionPlan(_spread(20, kind="legacy"), tiering="both"), id="legacy-both-tiers"),
        pytest.param(
            PartitionPlan(_spread(20, kind="legacy"), tiering="remote", local_deleted=0.5),
            id="legacy-mostly-remote",
        ),
        pytest.param(
            PartitionPlan(_spread(8, kind="legacy-v0") + _spread(12), tiering="remote", local_deleted=0.5),
            id="v0-then-v2",
        ),
        pytest.param(
            PartitionPlan(_spread(20, kind="legacy-v0"), tiering="both", retention_bytes_share=0.5),
            id="v0-only",
        ),
    ],
)
def test_named_shapes_answer_as_the_oracle(sqlite_template: Path, plan: PartitionPlan) -> None:
    run_example(Backend("sqlite-fs", sqlite_template=sqlite_template), plan, seed=7)


def test_read_committed_stops_at_a_transaction_open_at_the_high_watermark(
    sqlite_template: Path,
) -> None:
    # 10 plain batches, then 6 transactions (a batch and its marker each): 22 batches. The high
    # watermark is the marker of the third transaction (boundary 15 of 22), so that transaction
    # is still open to consumers: READ_COMMITTED must stop at its first offset.
    plan = PartitionPlan(_spread(10) + _spread(6, kind="commit"), tiering="both", high_watermark_at=15 / 22)
    with tempfile.TemporaryDirectory() as tmp:
        truth = write_partition(Path(tmp) / "logs", plan)
    open_first = truth.transactions[2][0]
    assert truth.high_watermark == truth.transactions[2][1]
    assert truth.last_fetchable(committed=True) == open_first < truth.high_watermark
    run_example(Backend("sqlite-fs", sqlite_template=sqlite_template), plan, seed=11)


@contextlib.contextmanager
def _open_fifth_transaction(sqlite_template: Path, *, expire: bool) -> Iterator[tuple[Tiered, int]]:
    """One batch per segment, six transactions; the high watermark is the marker of the fifth
    (boundary 9 of 12), which is still open to consumers: its records are tiered, its marker is
    not. With ``expire`` remote retention deletes every tiered segment. Yields the tiered partition
    and the open transaction's first offset."""
    plan = PartitionPlan(
        _spread(6, kind="commit"),
        segment_bytes=1,
        tiering="both",
        high_watermark_at=9 / 12,
        retention_bytes_share=0.0 if expire else None,
    )
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        truth = write_partition(root / "logs", plan)
        open_first, marker = truth.transactions[4]
        assert truth.high_watermark == marker
        rt = runtime(Backend("sqlite-fs", sqlite_template=sqlite_template), root, root / "logs")
        try:
            yield tier_partition(rt, LogDir(root / "logs").partition(TOPIC, 0), truth, plan), open_first
        finally:
            rt.close()


def test_read_committed_latest_tiered_is_unknown_when_the_tier_reaches_an_open_transaction(
    sqlite_template: Path,
) -> None:
    # Under READ_COMMITTED the last stable offset is the open transaction's first offset, at or
    # below the highest tiered offset, which Kafka does not give (as for any timestamp but LATEST
    # and EARLIEST): -1. READ_UNCOMMITTED gives it.
    with _open_fifth_transaction(sqlite_template, expire=False) as (tiered, open_first):
        truth, rt = tiered.truth, tiered.runtime
        assert (
            truth.last_fetchable(committed=True) == open_first <= truth.highest_copied < truth.high_watermark
        )
        committed = rt.lookup.find(tiered.tp, -5, isolation=IsolationLevel.READ_COMMITTED)
        assert (committed.offset, committed.tier) == (-1, None)
        assert rt.lookup.find(tiered.tp, -5).offset == truth.highest_copied
        query = TopicQuery(tiered.tp.topic, (PartitionQuery(tiered.tp.partition, -5),))
        (result,) = (
            rt.list_offsets.handle(ListOffsetsRequest((query,), isolation_level=1)).topics[0].partitions
        )
        assert (result.error_code, result.offset) == (ErrorCode.NONE, -1)
        check_against_oracle(tiered, random.Random(5))


def test_read_committed_latest_is_raised_to_a_log_start_remote_retention_moved(
    sqlite_template: Path,
) -> None:
    # The open transaction's records are in a segment of their own below the high watermark, so
    # they are tiered, and remote retention deleting every tiered segment moves the log start
    # offset past the transaction's first offset. The broker raises the first unstable offset to
    # the log start offset: READ_COMMITTED LATEST is the log start offset.
    with _open_fifth_transaction(sqlite_template, expire=True) as (tiered, open_first):
        truth, rt = tiered.truth, tiered.runtime
        assert tiered.retention_deleted > 0, tiered.notes
        assert open_first < truth.log_start_offset <= truth.high_watermark, tiered.notes
        answer = rt.lookup.find(tiered.tp, -1, isolation=IsolationLevel.READ_COMMITTED)
        assert answer.offset == truth.log_start_offset == truth.last_fetchable(committed=True)
        check_against_oracle(tiered, random.Random(3))


def test_earliest_and_latest_tiered_name_their_epochs_once_local_retention_cut_the_checkpoint(
    sqlite_template: Path,
) -> None:
    # Epochs 3, 4, 5 and 6 begin at offsets 0, 10, 24 and 50; local retention deleted every tiered
    # segment (0..47) and cut the broker's checkpoint to its first local offset, 48, epoch 5 moved
    # up to begin there: the earliest and latest tiered offsets take their epochs from the remote
    # tier (Kafka with tiered storage keeps them: 3 and 5), not -1.
    plan = PartitionPlan(_new_leaders(30, at=(5, 12, 25)), tiering="remote", local_deleted=1.0)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        truth = write_partition(root / "logs", plan)
        rt = runtime(Backend("sqlite-fs", sqlite_template=sqlite_template), root, root / "logs")
        try:
            tiered = tier_partition(rt, LogDir(root / "logs").partition(TOPIC, 0), truth, plan)
            assert [(e.epoch, e.start_offset) for e in truth.epochs] == [(3, 0), (4, 10), (5, 24), (6, 50)]
            assert truth.checkpoint_epochs == [EpochEntry(5, 48), EpochEntry(6, 50)], tiered.notes
            first, again = FetchStats(), FetchStats()
            answers = {special: rt.lookup.find(tiered.tp, special, stats=first) for special in (-2, -5)}
            assert answers == {-2: OffsetAnswer(0, -1, 3, "remote"), -5: OffsetAnswer(47, -1, 5, "remote")}
            assert first.gets >= 2  # each batch's header, read once
            asked_again = {special: rt.lookup.find(tiered.tp, special, stats=again) for special in (-2, -5)}
            assert asked_again == answers
            assert again.gets == 0  # then kept: a copy's bytes never change
            view = rt.lookup.remote_view(tiered.tp, tiered.partition)
            for special in (-2, -5):  # the epoch is read from the remote tier: on the reader pool
                planned = rt.lookup.plan(tiered.tp, special, local=tiered.partition, view=view)
                assert isinstance(planned, Search) and planned.reads_remote
                result = rt.list_offsets.find_one(tiered.tp, special)
                assert (result.offset, result.leader_epoch) == (
                    answers[special].offset,
                    answers[special].leader_epoch,
                )
            check_against_oracle(tiered, random.Random(13))
        finally:
            rt.close()
