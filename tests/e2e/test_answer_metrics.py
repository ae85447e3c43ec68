"""The answer-time histograms move for the tier that answered: lookups and fetches, local and remote."""

from __future__ import annotations

from rlm.metastore.model import TopicPartition
from tests.e2e.conftest import InProcess
from tests.lookup_support import NOW, TOPIC

TP = TopicPartition(TOPIC, 0)


def _count(in_process: InProcess, name: str, tier: str) -> float:
    value = in_process.runtime.metrics.registry.get_sample_value(f"{name}_count", {"tier": tier})
    return value or 0.0


def test_lookups_are_timed_by_the_tier_that_answered(in_process: InProcess) -> None:
    list_offsets = in_process.runtime.list_offsets
    before = {tier: _count(in_process, "rlm_lookup_seconds", tier) for tier in ("local", "remote", "none")}

    assert list_offsets.find_one(TP, NOW).tier == "remote"
    assert list_offsets.find_one(TP, -1).tier == "local"
    assert list_offsets.find_one(TP, NOW + 10**9).tier is None
    assert list_offsets.find_one(TopicPartition(TOPIC, 9), NOW).tier is None  # unknown partition

    after = {tier: _count(in_process, "rlm_lookup_seconds", tier) for tier in before}
    assert {tier: after[tier] - before[tier] for tier in before} == {"local": 1, "remote": 1, "none": 2}
    registry = in_process.runtime.metrics.registry
    summed = registry.get_sample_value("rlm_lookup_seconds_sum", {"tier": "remote"})
    assert summed is not None and summed > 0


def test_fetches_are_timed_by_the_tier_read(in_process: InProcess) -> None:
    runtime = in_process.runtime
    earliest = runtime.list_offsets.find_one(TP, -2).offset
    latest_local = runtime.list_offsets.find_one(TP, -4).offset
    before = {tier: _count(in_process, "rlm_fetch_seconds", tier) for tier in ("local", "remote")}

    assert runtime.fetcher.fetch(TP, earliest, 1000).tier == "remote"
    assert runtime.fetcher.fetch(TP, latest_local, 1000).tier == "local"

    after = {tier: _count(in_process, "rlm_fetch_seconds", tier) for tier in before}
    assert {tier: after[tier] - before[tier] for tier in before} == {"local": 1, "remote": 1}
