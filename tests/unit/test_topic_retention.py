"""Each topic's retention from rlm's settings and the broker's overrides (pure rules)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlm.config import Settings, TopicSettings, load_settings
from rlm.tiering.topic_retention import Unreadable, longer, resolve

HOUR = 3_600_000
DEFAULTS = TopicSettings(retention_ms=HOUR, retention_bytes=-1)


def _settings(**topics: TopicSettings) -> Settings:
    return Settings(topic_defaults=DEFAULTS, topic_overrides=topics)


def _times(
    settings: Settings, committed: dict[str, str], pending: dict[str, str] | None = None
) -> tuple[int, int]:
    resolved = resolve(settings, "orders", {"orders": committed}, {"orders": pending or committed})
    return resolved.settings.retention_ms, resolved.settings.retention_bytes


def test_longer_treats_minus_one_as_unlimited() -> None:
    assert (longer(-1, 5), longer(5, -1), longer(3, 5), longer(0, 0)) == (-1, -1, 5, 0)


def test_the_brokers_override_beats_rlms_default() -> None:
    assert _times(_settings(), {"retention.ms": "-1"}) == (-1, -1)
    assert _times(_settings(), {"retention.ms": "60000", "retention.bytes": "10"}) == (60000, 10)
    assert _times(_settings(), {}) == (HOUR, -1)


def test_the_longer_of_the_committed_and_the_pending_outcome_counts() -> None:
    assert _times(_settings(), {"retention.ms": "-1"}, {"retention.ms": "5"}) == (-1, -1)
    assert _times(_settings(), {}, {"retention.ms": "5"}) == (HOUR, -1)  # the committed: the default
    assert _times(_settings(), {}, {"retention.ms": str(2 * HOUR)}) == (2 * HOUR, -1)


def test_an_explicit_rlm_topic_key_wins_and_reports_a_shorter_value() -> None:
    settings = _settings(orders=TopicSettings(retention_ms=HOUR))
    resolved = resolve(settings, "orders", {"orders": {"retention.ms": "-1"}}, {})
    assert resolved.settings.retention_ms == HOUR
    assert resolved.shorter == (("retention.ms", HOUR, -1),)
    longer_ours = resolve(
        _settings(orders=TopicSettings(retention_ms=-1)), "orders", {"orders": {"retention.ms": "5"}}, {}
    )
    assert longer_ours.shorter == ()


def test_only_the_keys_an_rlm_topic_entry_sets_win() -> None:
    settings = _settings(orders=TopicSettings(retention_ms=HOUR, retention_bytes=7)).replace(
        topic_override_keys={"orders": frozenset({"retention_bytes"})}
    )
    assert _times(settings, {"retention.ms": "-1", "retention.bytes": "-1"}) == (-1, 7)


@pytest.mark.parametrize(
    "value", ["forever", "-9223372036854775809", "", "1.5", "99999999999999999999999999"]
)
def test_an_unreadable_override_turns_time_and_size_retention_off(value: str) -> None:
    resolved = resolve(_settings(), "orders", {"orders": {"retention.bytes": value}}, {})
    assert (resolved.settings.retention_ms, resolved.settings.retention_bytes) == (-1, -1)
    assert resolved.unreadable == (Unreadable("retention.bytes", value),)


@pytest.mark.parametrize("value", ["-2", "-1000", "-9223372036854775808"])
def test_a_negative_retention_bytes_override_is_unlimited_as_in_kafka(value: str) -> None:
    # LogConfig gives retention.bytes no validator ("can be negative"): the broker keeps any
    # negative size, and both tiers delete nothing by size; time retention goes on.
    image = {"orders": {"retention.bytes": value, "retention.ms": "5"}}
    resolved = resolve(_settings(), "orders", image, image)
    assert resolved.unreadable == ()
    assert (resolved.settings.retention_ms, resolved.settings.retention_bytes) == (5, -1)


def test_the_settings_file_records_which_keys_a_topic_entry_sets(tmp_path: Path) -> None:
    path = tmp_path / "rlm.yaml"
    path.write_text("topics:\n  defaults: {retention.ms: 5}\n  orders: {cleanup.policy: compact}\n")
    settings = load_settings(path, env={})
    assert settings.topic_override_keys == {"orders": frozenset({"cleanup_policy"})}
    assert not settings.topic_sets("orders", "retention_ms") and settings.topic_sets(
        "orders", "cleanup_policy"
    )
    assert not settings.topic_sets("clicks", "retention_ms")


def test_an_incompletely_read_metadata_log_turns_time_and_size_retention_off() -> None:
    image = {"orders": {"retention.ms": "5"}}
    resolved = resolve(_settings(), "orders", image, image, incomplete=True)
    assert resolved.incomplete and (resolved.settings.retention_ms, resolved.settings.retention_bytes) == (
        -1,
        -1,
    )
    ours = _settings(orders=TopicSettings(retention_ms=HOUR, retention_bytes=7))  # sets both keys
    resolved = resolve(ours, "orders", image, image, incomplete=True)
    assert not resolved.incomplete and (
        resolved.settings.retention_ms,
        resolved.settings.retention_bytes,
    ) == (HOUR, 7)
