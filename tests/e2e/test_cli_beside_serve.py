"""One-shot commands beside a running ``rlm serve`` of the same working directory, each a
real process: the server holds the remote index cache's directory, a command keeps its own."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rlm.bootstrap import build_runtime
from rlm.cli import main
from rlm.config import load_settings
from rlm.errors import ConfigError
from rlm.log.logdir import LogDir
from rlm.log.produce import ProduceSpec, produce
from rlm.lookup.index_cache import RemoteIndexCache
from rlm.metastore.model import TopicPartition
from rlm.metrics import Metrics
from rlm.storage.filesystem import FilesystemStorage
from tests.e2e.conftest import start_serve, subprocess_env

CACHE_DIR = Path("build/rlm/index-cache")
#: The processes run in another directory than this checkout's: they import it from here.
ENV = {"PYTHONPATH": str(Path(__file__).resolve().parents[2])}


def _tiered_partition(
    tmp_path: Path, sqlite_template: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[dict[str, Any], list[str], int]:
    """A partition tiered by ``rlm copy --once`` whose first segment only the remote tier holds:
    the serve settings, the command-line options and a timestamp in that first segment."""
    remote, db, logs = tmp_path / "remote", tmp_path / "meta.db", tmp_path / "logs"
    remote.mkdir()
    shutil.copyfile(sqlite_template, db)
    produce(logs, ProduceSpec(topics=1, partitions=1, records=1500, segment_bytes=16 * 1024, seed=5))
    settings = {
        "log.dirs": [str(logs)],
        "metadata.url": f"sqlite:///{db}",
        "remote.url": remote.as_uri(),
        "auth.enabled": False,
        "topics": {"defaults": {"retention.ms": -1}},  # the sample's timestamps are years old
    }
    options = ["--log-dirs", str(logs), "--metadata-url", f"sqlite:///{db}", "--remote-url", remote.as_uri()]
    assert main(["copy", "--once", "--quiet", *options]) == 0
    capsys.readouterr()
    first = LogDir(logs).partition("orders", 0).segments()[0]
    target = next(iter(first.headers())).max_timestamp
    for suffix in (".log", ".index", ".timeindex", ".txnindex"):
        first.path(suffix).unlink(missing_ok=True)  # the broker's local retention
    return settings, options, target


def test_lookup_beside_serve_keeps_a_private_index_cache_and_a_second_serve_is_refused(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    sqlite_template: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)  # both processes use the default cache directory, relative to it
    settings, options, target = _tiered_partition(tmp_path, sqlite_template, capsys)

    served = start_serve(tmp_path, settings, env=ENV)
    try:
        looked_up = subprocess.run(
            [sys.executable, "-m", "rlm", "lookup", "orders", "0", "--timestamp", str(target), *options],
            capture_output=True,
            text=True,
            env=subprocess_env(ENV),
            check=False,
        )
        assert looked_up.returncode == 0, looked_up.stderr
        assert json.loads(looked_up.stdout)["tier"] == "remote"

        second = subprocess.run(
            [sys.executable, "-m", "rlm", "serve", "--config", str(tmp_path / "serve.yaml")],
            capture_output=True,
            text=True,
            env=subprocess_env(ENV),
            timeout=60,
            check=False,
        )
        assert second.returncode != 0
        assert f"{CACHE_DIR} is in use by another remote index cache" in second.stdout + second.stderr
    finally:
        assert served.terminate() == 0, served.log_text()


def test_serve_starts_while_a_one_shot_command_reads_remote_indexes(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    sqlite_template: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # An `rlm lookup` (or copy/retention --once) run with `kubectl exec` while the sidecar restarts:
    # the long-running server must get the shared index cache, the one-shot command keeps its own.
    monkeypatch.chdir(tmp_path)
    settings, _, target = _tiered_partition(tmp_path, sqlite_template, capsys)
    remote, db, logs = tmp_path / "remote", tmp_path / "meta.db", tmp_path / "logs"

    one_shot = build_runtime(
        load_settings(env={}, log_dirs=(logs,), metadata_url=f"sqlite:///{db}", remote_url=remote.as_uri()),
        index_cache_on_demand=True,
    )
    try:
        found = one_shot.list_offsets.find_one(TopicPartition("orders", 0), target, None)
        assert found.tier == "remote"
        assert one_shot.index_cache.entries > 0
        private = one_shot.index_cache.directory
        served = start_serve(tmp_path, settings, env=ENV)
        try:
            with pytest.raises(ConfigError, match="in use by another remote index cache"):
                RemoteIndexCache(CACHE_DIR, FilesystemStorage(remote), Metrics())  # the server holds it
        finally:
            assert served.terminate() == 0, served.log_text()
    finally:
        one_shot.close()
    assert not private.exists()
