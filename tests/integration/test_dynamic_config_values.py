"""Settings read back as given, and held at start to what the components that use them can take."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from api.grpc_messages import config_response
from rlm.arguments import INT64_MAX
from rlm.bootstrap import Runtime
from rlm.config import load_settings
from rlm.errors import ConfigError
from tests.lookup_support import Backend, BatchPlan, PartitionPlan, runtime, write_partition


@pytest.fixture
def sidecar(tmp_path: Path, sqlite_template: Path) -> Iterator[Runtime]:
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    rt = runtime(
        Backend("sqlite-fs", sqlite_template=sqlite_template),
        tmp_path,
        log_dir,
        remote_log_manager_copy_max_bytes_per_second=2**53 + 1,
    )
    try:
        yield rt
    finally:
        rt.close()


def test_the_upload_rate_limit_reads_back_as_it_was_set(sidecar: Runtime) -> None:
    dynamic = sidecar.dynamic_config
    assert dynamic.current().remote_log_manager_copy_max_bytes_per_second == 2**53 + 1
    for rate in (INT64_MAX, 2**53 + 3, 1_000_001, -1):
        current = dynamic.update(copy_max_bytes_per_second=rate)
        assert current.remote_log_manager_copy_max_bytes_per_second == rate
        assert dynamic.current().remote_log_manager_copy_max_bytes_per_second == rate
        # gRPC's GetConfig and UpdateConfig answer with it (an int64 field).
        assert config_response(current).remote_log_manager_copy_max_bytes_per_second == rate


@pytest.mark.parametrize("value", ["3600001", "3000000000", "9223372036854775807"])
def test_a_default_request_timeout_longer_than_a_request_may_ask_for_is_refused(value: str) -> None:
    # Neither a request (timeout_ms) nor PATCH /v1/config may ask for more than an hour; a longer
    # default was taken, and then gRPC's GetConfig could not answer it (an int32 field) and a
    # blocking lookup (rlm lookup) failed on a wait longer than the platform's clock holds.
    with pytest.raises(
        ConfigError, match=rf"remote\.list\.offsets\.request\.timeout\.ms must be 1 to 3600000, not {value}"
    ):
        load_settings(env={"RLM_REMOTE_LIST_OFFSETS_REQUEST_TIMEOUT_MS": value})
    assert (
        load_settings(
            env={"RLM_REMOTE_LIST_OFFSETS_REQUEST_TIMEOUT_MS": "3600000"}
        ).remote_list_offsets_request_timeout_ms
        == 3_600_000
    )


@pytest.mark.parametrize(
    "name", ["RLM_REMOTE_LOG_MANAGER_LEASE_TTL_MS", "RLM_REMOTE_COMPACTION_LEASE_TTL_MS"]
)
def test_a_lease_ttl_past_int32_is_refused_naming_the_setting(name: str) -> None:
    # A lease expires at now + ttl (and a claim is kept 10 ttls): at Long.MAX_VALUE that is past
    # what the metadata store's BIGINT holds, and every copier pass failed on its first lease.
    key = name.removeprefix("RLM_").lower().replace("_", ".")
    for value in ("2147483648", "9223372036854775807"):
        with pytest.raises(ConfigError, match=rf"^{re.escape(key)} must be 1 to 2147483647, not {value}"):
            load_settings(env={name: value})


def test_the_longest_lease_ttl_tiers(tmp_path: Path, sqlite_template: Path) -> None:
    log_dir = tmp_path / "logs"
    plan = PartitionPlan(
        batches=tuple(BatchPlan(timestamps=(i * 100,)) for i in range(40)), segment_bytes=1024
    )
    write_partition(log_dir, plan)
    rt = runtime(
        Backend("sqlite-fs", sqlite_template=sqlite_template),
        tmp_path,
        log_dir,
        remote_log_manager_lease_ttl_ms=2**31 - 1,
    )
    try:
        (outcome,) = rt.copier.run_once()
        assert outcome.error is None and outcome.copied_segments > 0
    finally:
        rt.close()
