"""metadata.statement.timeout.ms is held to what PostgreSQL's statement_timeout takes."""

from __future__ import annotations

import pytest

from rlm.bootstrap import open_store
from rlm.config import load_settings
from rlm.errors import ConfigError
from rlm.metastore import TopicPartition

pytestmark = pytest.mark.postgres


@pytest.mark.parametrize("value", ["2147483648", "9223372036854775807"])
def test_a_statement_timeout_postgresql_cannot_take_is_refused_naming_the_setting(
    postgres_url: str, value: str
) -> None:
    # PostgreSQL refused every connection that asked for it ("invalid value for parameter
    # statement_timeout"): the sidecar started, then reported the metadata store unavailable.
    env = {"RLM_METADATA_URL": postgres_url, "RLM_METADATA_STATEMENT_TIMEOUT_MS": value}
    with pytest.raises(
        ConfigError, match=rf"metadata\.statement\.timeout\.ms must be 1 to 2147483647 .*, not {value}"
    ):
        load_settings(env=env)


def test_the_longest_statement_timeout_postgresql_takes_works(postgres_url: str) -> None:
    env = {"RLM_METADATA_URL": postgres_url, "RLM_METADATA_STATEMENT_TIMEOUT_MS": "2147483647"}
    store = open_store(load_settings(env=env))
    try:
        # The database is the session's, shared with other tests: a name none of them uses.
        assert store.get_partition(TopicPartition("statement-timeout-probe", 0)) is None
    finally:
        store.close()
