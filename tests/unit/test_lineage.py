"""Where the remote tier's leader epochs stop being the broker's log's (rlm.tiering.lineage)."""

from __future__ import annotations

from rlm.log.checkpoints import EpochEntry
from rlm.metastore.model import RemoteSegment
from rlm.tiering.lineage import behind, find_divergence, read_ranges
from tests.metadata_support import segment

# The old leader led epoch 5 from offset 100; the remote tier holds its records up to 180.
BEFORE = segment(0, 99, epochs=((3, 0), (4, 60)))
OLD = segment(100, 180, epochs=((5, 100),))
# The new leader, elected uncleanly, never had epoch 5: its epoch 4 went on to 119, 6 from 120.
NEW_LEADER = (EpochEntry(3, 0), EpochEntry(4, 60), EpochEntry(6, 120))


def diverges(finished: list[RemoteSegment], local: tuple[EpochEntry, ...], **kw: int) -> int | None:
    found = find_divergence(finished, local, **{"log_start_offset": 0, "high_watermark": 300, **kw})
    return None if found is None else found.offset


def test_a_remote_tier_on_the_logs_lineage_does_not_diverge() -> None:
    follower = (EpochEntry(3, 0), EpochEntry(4, 60), EpochEntry(5, 100), EpochEntry(7, 400))
    assert diverges([BEFORE, OLD], follower) is None
    # A follower behind the remote tier (high watermark 150, no epoch 5 yet) cannot tell yet.
    assert diverges([BEFORE, OLD], (EpochEntry(3, 0), EpochEntry(4, 60)), high_watermark=100) is None


def test_the_old_leaders_records_are_found_where_the_epochs_part() -> None:
    found = find_divergence([BEFORE, OLD], NEW_LEADER, log_start_offset=0, high_watermark=300)
    assert found is not None
    assert (found.offset, found.remote_epoch, found.local_epoch) == (100, 5, 4)
    assert (found.copy, found.replace_from, found.replaced_epoch) == (OLD, 100, 5)


def test_a_divergence_inside_a_copy_is_replaced_from_the_copys_start() -> None:
    # The old leader's epoch 5 began at 100 in both logs; the new leader took over at 150.
    old = segment(80, 180, epochs=((4, 80), (5, 100)))
    new_leader = (EpochEntry(4, 0), EpochEntry(5, 100), EpochEntry(6, 150))
    found = find_divergence(
        [segment(0, 79, epochs=((4, 0),)), old], new_leader, log_start_offset=0, high_watermark=200
    )
    assert found is not None
    assert (found.offset, found.remote_epoch, found.local_epoch, found.replace_from) == (150, 5, 6, 80)


def test_only_committed_offsets_from_the_log_start_are_compared() -> None:
    assert diverges([BEFORE, OLD], NEW_LEADER, high_watermark=100) is None  # 100 not committed yet
    assert diverges([BEFORE, OLD], NEW_LEADER, high_watermark=101) == 100
    # Offsets the local log no longer holds (or the checkpoint no longer names) are not compared.
    assert diverges([BEFORE, OLD], NEW_LEADER, log_start_offset=130) == 130
    assert diverges([BEFORE, OLD], NEW_LEADER, log_start_offset=181) is None
    assert diverges([BEFORE, OLD], (EpochEntry(6, 181),)) is None


def test_a_stale_replica_replaces_nothing() -> None:
    # The old leader's replica, not truncated yet, while the new leader's log is tiered from 120.
    new = segment(120, 250, epochs=((6, 120),))
    old_leader = (EpochEntry(3, 0), EpochEntry(4, 60), EpochEntry(5, 100))
    assert diverges([BEFORE, OLD, new], old_leader) is None
    # ...and the new leader replaces its predecessor's copy even under its own takeover copy.
    found = find_divergence([BEFORE, OLD, new], NEW_LEADER, log_start_offset=0, high_watermark=300)
    assert found is not None and (found.offset, found.replace_from, found.replaced_epoch) == (100, 100, 6)


def test_a_later_copy_answers_from_its_start_and_one_inside_answers_for_nothing() -> None:
    later = segment(150, 250, epochs=((6, 150),))
    inside = segment(110, 120, epochs=((9, 110),))
    assert [(s, a, b) for s, a, b in read_ranges([later, inside, OLD, BEFORE])] == [
        (BEFORE, 0, 99),
        (OLD, 100, 149),
        (later, 150, 250),
    ]
    # The copy lying inside is not what reads answer from: its epoch 9 is not compared.
    local = (EpochEntry(3, 0), EpochEntry(4, 60), EpochEntry(5, 100), EpochEntry(6, 150))
    assert diverges([BEFORE, OLD, inside, later], local) is None


def test_a_log_without_a_leader_epoch_checkpoint_is_not_compared() -> None:
    # Legacy messages carry no epoch: the broker assigns none, and its checkpoint names none.
    assert diverges([BEFORE, OLD], ()) is None


def test_a_log_is_behind_the_remote_tier_when_a_copy_holds_a_newer_epoch_than_its_latest() -> None:
    assert behind([BEFORE, OLD], (EpochEntry(3, 0), EpochEntry(4, 60)))  # the old leader's 5 is newer
    assert not behind([BEFORE, OLD], NEW_LEADER)
    assert not behind([BEFORE, OLD], ())  # nothing known of the log
    assert not behind([], NEW_LEADER)
