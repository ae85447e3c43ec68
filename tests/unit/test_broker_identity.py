"""broker.id from the log directories' meta.properties, when it is not set."""

from __future__ import annotations

import argparse
import os
import threading
from pathlib import Path

import pytest

from rlm.cli import serve as serve_cmd
from rlm.config import load_settings
from rlm.errors import BrokerIdUnknownError, ConfigError
from rlm.log.checkpoints import write_meta_properties
from rlm.log.identity import broker_id_from_log_dirs, cluster_id_from_log_dirs


def _log_dir(root: Path, name: str, **props: str) -> Path:
    path = root / name
    path.mkdir()
    if props:
        write_meta_properties(path / "meta.properties", {"version": "1", "cluster.id": "c1", **props})
    return path


def test_node_id_of_a_kraft_broker(tmp_path: Path) -> None:
    a = _log_dir(tmp_path, "a", **{"node.id": "3"})
    b = _log_dir(tmp_path, "b", **{"node.id": "3"})
    assert broker_id_from_log_dirs([a, b]) == 3
    assert load_settings(env={"RLM_LOG_DIRS": f"{a},{b}"}).broker_id == 3


def test_broker_id_of_a_zookeeper_era_broker(tmp_path: Path) -> None:
    a = _log_dir(tmp_path, "a", **{"broker.id": "1002"})
    assert broker_id_from_log_dirs([a]) == 1002


def test_node_id_wins_over_broker_id(tmp_path: Path) -> None:
    a = _log_dir(tmp_path, "a", **{"node.id": "4", "broker.id": "9"})
    assert broker_id_from_log_dirs([a]) == 4


def test_a_set_broker_id_the_log_dirs_agree_with_or_do_not_name_is_taken(tmp_path: Path) -> None:
    a = _log_dir(tmp_path, "a", **{"node.id": "7"})
    empty = _log_dir(tmp_path, "empty")
    assert load_settings(env={"RLM_LOG_DIRS": f"{a},{empty}", "RLM_BROKER_ID": "7"}).broker_id == 7
    assert load_settings(env={"RLM_LOG_DIRS": str(empty), "RLM_BROKER_ID": "7"}).broker_id == 7


def test_a_set_broker_id_a_log_dir_contradicts_is_refused_as_kafka_refuses_it(tmp_path: Path) -> None:
    """A values file copied between pods must not give one sidecar another broker's leases."""
    empty = _log_dir(tmp_path, "empty")
    a = _log_dir(tmp_path, "a", **{"node.id": "4"})
    with pytest.raises(ConfigError, match=rf"broker.id is 7 but {a}/meta.properties says the broker is 4"):
        load_settings(env={"RLM_LOG_DIRS": f"{empty},{a}", "RLM_BROKER_ID": "7"})
    with pytest.raises(ConfigError, match="says the broker is 4"):
        load_settings(env={"RLM_LOG_DIRS": str(a)}, broker_id=7)


def test_a_log_dir_not_formatted_yet_is_passed_over(tmp_path: Path) -> None:
    a = _log_dir(tmp_path, "a", **{"node.id": "5"})
    fresh = _log_dir(tmp_path, "fresh")
    assert broker_id_from_log_dirs([fresh, a]) == 5


def test_no_meta_properties_anywhere_is_a_retriable_error_naming_the_dirs(tmp_path: Path) -> None:
    a, b = _log_dir(tmp_path, "a"), _log_dir(tmp_path, "b")
    message = rf"no log directory \({a}, {b}\) has a meta.properties"
    with pytest.raises(BrokerIdUnknownError, match=message) as err:
        load_settings(env={"RLM_LOG_DIRS": f"{a},{b}"})
    assert err.value.retriable


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"cluster.id": "c1"}, "names no broker: it has neither node.id nor broker.id"),
        ({"node.id": "three"}, "node.id='three' is not an integer"),
    ],
)
def test_a_meta_properties_without_a_usable_id_is_an_error(
    tmp_path: Path, props: dict[str, str], message: str
) -> None:
    a = _log_dir(tmp_path, "a", **props)
    with pytest.raises(ConfigError, match=message) as err:
        broker_id_from_log_dirs([a])
    assert not isinstance(err.value, BrokerIdUnknownError)


def test_log_dirs_of_different_brokers_are_an_error(tmp_path: Path) -> None:
    a = _log_dir(tmp_path, "a", **{"node.id": "1"})
    b = _log_dir(tmp_path, "b", **{"node.id": "2"})
    with pytest.raises(ConfigError, match=r"belong to different brokers .*says 1.*says 2"):
        broker_id_from_log_dirs([a, b])


def test_without_log_dirs_the_broker_id_is_not_needed() -> None:
    assert load_settings(env={}).broker_id == 0


def _serve_args(log_dir: Path, wait_s: float) -> argparse.Namespace:
    return argparse.Namespace(
        config=None, log_dirs=str(log_dir), metadata_url=None, remote_url=None, broker_id=None,
        wait_for_broker_id=wait_s,
    )  # fmt: skip


def test_serve_waits_for_the_broker_to_format_its_log_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(serve_cmd, "BROKER_ID_POLL_S", 0.05)
    for name in [k for k in os.environ if k.startswith("RLM_")]:
        monkeypatch.delenv(name)
    log_dir = _log_dir(tmp_path, "a")
    formatting = threading.Timer(0.3, write_meta_properties, (log_dir / "meta.properties", {"node.id": "6"}))
    formatting.start()
    try:
        assert serve_cmd._settings_once_known(_serve_args(log_dir, 30)).broker_id == 6
    finally:
        formatting.cancel()


def test_serve_gives_up_after_its_wait(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(serve_cmd, "BROKER_ID_POLL_S", 0.05)
    for name in [k for k in os.environ if k.startswith("RLM_")]:
        monkeypatch.delenv(name)
    with pytest.raises(BrokerIdUnknownError):
        serve_cmd._settings_once_known(_serve_args(_log_dir(tmp_path, "a"), 0.2))


def test_the_cluster_id_is_the_one_every_log_directory_names(tmp_path: Path) -> None:
    a = _log_dir(tmp_path, "a", **{"node.id": "3"})
    b = _log_dir(tmp_path, "b", **{"node.id": "3"})
    unformatted = _log_dir(tmp_path, "c")
    assert cluster_id_from_log_dirs([a, b, unformatted]) == "c1"
    assert cluster_id_from_log_dirs([unformatted]) is None
    write_meta_properties(b / "meta.properties", {"version": "0", "broker.id": "3"})  # names none
    assert cluster_id_from_log_dirs([a, b]) == "c1"
    write_meta_properties(b / "meta.properties", {"version": "1", "node.id": "3", "cluster.id": "c2"})
    with pytest.raises(ConfigError, match="the log directories belong to different Kafka clusters"):
        cluster_id_from_log_dirs([a, b])


def test_a_meta_properties_that_cannot_be_read_is_passed_over_while_another_names_the_ids(
    tmp_path: Path,
) -> None:
    a = _log_dir(tmp_path, "a", **{"node.id": "3"})
    failed = _log_dir(tmp_path, "failed")
    (failed / "meta.properties").mkdir()  # an I/O error reading it
    malformed = _log_dir(tmp_path, "malformed")
    (malformed / "meta.properties").write_text("node.id=3\ncluster.id=\\u12\n", "latin-1")

    assert broker_id_from_log_dirs([failed, a, malformed]) == 3
    assert cluster_id_from_log_dirs([failed, a, malformed]) == "c1"
    assert cluster_id_from_log_dirs([failed, malformed]) is None
    with pytest.raises(
        ConfigError, match=rf"cannot read {failed / 'meta.properties'}: .*; cannot read"
    ) as err:
        broker_id_from_log_dirs([failed, malformed])
    assert not isinstance(err.value, BrokerIdUnknownError)
    # Two clusters are refused all the same.
    b = _log_dir(tmp_path, "b", **{"node.id": "3", "cluster.id": "c2"})
    with pytest.raises(ConfigError, match="the log directories belong to different Kafka clusters"):
        cluster_id_from_log_dirs([failed, a, b])
