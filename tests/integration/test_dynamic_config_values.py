"""The run-time settings report the values they were given."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from api.grpc_messages import config_response
from rlm.arguments import INT64_MAX
from rlm.bootstrap import Runtime
from rlm.config import load_settings
from rlm.errors import ConfigError
from tests.lookup_support import Backend, runtime


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
