"""Properties of the remote segment and partition deletion state machines (pure logic)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlm.errors import InvalidStateTransitionError
from rlm.metastore import PartitionState, SegmentState, check_transition

S = SegmentState
P = PartitionState
#: design.md: the allowed moves, a state repeating itself aside.
SEGMENT_MOVES = {
    (S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED),
    (S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED),
    (S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED),
    (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED),
}
PARTITION_MOVES = {
    (None, P.DELETE_PARTITION_MARKED),
    (P.DELETE_PARTITION_MARKED, P.DELETE_PARTITION_STARTED),
    (P.DELETE_PARTITION_STARTED, P.DELETE_PARTITION_FINISHED),
}
ORDER = {state: rank for rank, state in enumerate(SegmentState)}


@given(st.sampled_from(SegmentState), st.sampled_from(SegmentState))
def test_segment_transitions_follow_the_design(current: S, requested: S) -> None:
    if current is requested:
        assert check_transition(current, requested) is False
    elif (current, requested) in SEGMENT_MOVES:
        assert check_transition(current, requested) is True
    else:
        with pytest.raises(InvalidStateTransitionError) as raised:
            check_transition(current, requested, subject="segment x")
        message = str(raised.value)
        assert f"from {current.value} to {requested.value}" in message
        assert message.startswith("segment x: ")
        assert (raised.value.current, raised.value.requested) == (current.value, requested.value)


@given(st.lists(st.sampled_from(SegmentState), max_size=30))
def test_any_sequence_of_requests_only_moves_forward(requests: list[S]) -> None:
    state = S.COPY_SEGMENT_STARTED
    visited = [state]
    for requested in requests:
        try:
            changed = check_transition(state, requested)
        except InvalidStateTransitionError:
            continue
        if changed:
            assert ORDER[requested] > ORDER[state]
            state = requested
            visited.append(state)
    # At most one step per state, never a cycle, and FINISHED never follows a delete.
    assert len(visited) == len(set(visited)) <= 4
    if S.DELETE_SEGMENT_STARTED in visited and S.COPY_SEGMENT_FINISHED in visited:
        assert visited.index(S.COPY_SEGMENT_FINISHED) < visited.index(S.DELETE_SEGMENT_STARTED)


@given(st.sampled_from(SegmentState))
def test_repeating_a_state_is_always_a_no_op(state: S) -> None:
    assert check_transition(state, state) is False


def test_every_segment_state_can_reach_delete_finished() -> None:
    for state in SegmentState:
        frontier = {state}
        while S.DELETE_SEGMENT_FINISHED not in frontier:
            grown = frontier | {n for s in frontier for n in s.successors}
            assert grown != frontier, state
            frontier = grown
    assert S.DELETE_SEGMENT_FINISHED.successors == frozenset()


@given(st.sampled_from([None, *PartitionState]), st.sampled_from(PartitionState))
def test_partition_transitions_follow_the_design(current: P | None, requested: P) -> None:
    if current is requested:
        assert check_transition(current, requested) is False
    elif (current, requested) in PARTITION_MOVES:
        assert check_transition(current, requested) is True
    else:
        with pytest.raises(InvalidStateTransitionError) as raised:
            check_transition(current, requested)
        assert requested.value in str(raised.value)
        expected_current = "no deletion state" if current is None else current.value
        assert f"from {expected_current} to" in str(raised.value)


@given(st.sampled_from(SegmentState), st.sampled_from(PartitionState))
def test_states_of_different_machines_do_not_mix(segment: S, partition: P) -> None:
    with pytest.raises(TypeError):
        check_transition(segment, partition)
    with pytest.raises(TypeError):
        check_transition(partition, segment)
    with pytest.raises(TypeError):
        check_transition(None, segment)
