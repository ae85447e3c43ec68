"""The service commands end to end on the embedded defaults: db upgrade, copy, lookup, retention."""

from __future__ import annotations

import json
import logging
import re
import shutil
from pathlib import Path

import pytest

from rlm.cli import main
from rlm.config import Settings
from rlm.log.logdir import LogDir
from rlm.log.produce import ProduceSpec, produce
from rlm.lookup.index_cache import RemoteIndexCache
from rlm.metrics import Metrics
from rlm.storage.filesystem import FilesystemStorage


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_copy_lookup_and_retention_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    logs = tmp_path / "logs"
    produce(logs, ProduceSpec(topics=1, partitions=1, records=3000, segment_bytes=32 * 1024, seed=9))
    url = f"sqlite:///{tmp_path / 'meta.db'}"
    config = tmp_path / "rlm.yaml"
    config.write_text(
        f"log.dirs: [{logs}]\nmetadata.url: {url}\nremote.url: {(tmp_path / 'remote').as_uri()}\n"
        "topics:\n  defaults: {retention.ms: -1}\n"
    )

    code, _, err = _run(capsys, "copy", "--once", "--quiet", "--config", str(config))
    assert code == 1 and "rlm db upgrade" in err  # an un-migrated database is refused, saying why

    assert _run(capsys, "db", "upgrade", "--url", url)[0] == 0
    code, out, _ = _run(capsys, "copy", "--once", "--quiet", "--config", str(config))
    segments = LogDir(logs).partition("orders", 0).segments()
    assert code == 0
    assert f"orders-0: copied {len(segments) - 1} segments" in out

    first = segments[0]
    target = next(iter(first.headers())).max_timestamp
    expected = LogDir(logs).partition("orders", 0).find_offset_by_timestamp(target)
    assert expected is not None
    for suffix in (".log", ".index", ".timeindex", ".txnindex"):
        first.path(suffix).unlink(missing_ok=True)  # the broker's local retention
    code, out, _ = _run(capsys, "lookup", "orders", "0", "--timestamp", str(target), "--config", str(config))
    answer = json.loads(out)
    assert code == 0
    assert (answer["offset"], answer["timestamp"], answer["tier"]) == (
        expected.offset,
        expected.timestamp,
        "remote",
    )

    code, _, err = _run(capsys, "lookup", "orders", "7", "--timestamp", "0", "--config", str(config))
    assert code == 1 and "unknown topic-partition orders-7" in err

    config.write_text(config.read_text().replace("retention.ms: -1", "retention.ms: 1000"))
    code, out, _ = _run(capsys, "retention", "--once", "--config", str(config))
    assert code == 0
    assert f"orders-0: deleted {len(segments) - 1} segments" in out


def test_copy_and_lookup_run_beside_another_process_holding_the_index_cache(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    sqlite_template: Path,
) -> None:
    # `rlm serve` holds the index cache of its working directory; copy never reads the cache and a
    # lookup the local tier answers does not either: both run beside it. A remote lookup, which
    # needs a cache, keeps it in a temporary directory of its own.
    monkeypatch.chdir(tmp_path)
    logs = tmp_path / "logs"
    produce(logs, ProduceSpec(topics=1, partitions=1, records=1200, segment_bytes=16 * 1024, seed=2))
    db = tmp_path / "meta.db"
    shutil.copyfile(sqlite_template, db)
    remote = tmp_path / "remote"
    remote.mkdir()
    settings = ["--log-dirs", str(logs), "--metadata-url", f"sqlite:///{db}", "--remote-url", remote.as_uri()]
    held = RemoteIndexCache(Settings().remote_log_index_cache_dir, FilesystemStorage(remote), Metrics())
    try:
        code, out, err = _run(capsys, "copy", "--once", "--quiet", *settings)
        assert code == 0, err
        assert "copied" in out
        code, out, err = _run(capsys, "lookup", "orders", "0", "--timestamp", "latest", *settings)
        assert code == 0, err
        assert json.loads(out)["tier"] == "local"
        first = LogDir(logs).partition("orders", 0).segments()[0]
        target = next(iter(first.headers())).max_timestamp
        for suffix in (".log", ".index", ".timeindex", ".txnindex"):
            first.path(suffix).unlink(missing_ok=True)
        with caplog.at_level(logging.INFO):
            code, out, err = _run(capsys, "lookup", "orders", "0", "--timestamp", str(target), *settings)
        assert code == 0 and json.loads(out)["tier"] == "remote", err
        private = re.search(r"kept in a temporary directory, (\S+), removed at exit", caplog.text)
        assert private is not None, caplog.text
        assert not Path(private[1]).exists()  # removed when the command ended
    finally:
        held.close()
    code, out, err = _run(capsys, "lookup", "orders", "0", "--timestamp", str(target), *settings)
    assert code == 0 and json.loads(out)["tier"] == "remote", err
