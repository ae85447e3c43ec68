"""``rlm lookup`` in-process beside a running ``rlm serve`` of the same working directory, each a
real process: the server holds the remote index cache's directory, the command keeps its own."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rlm.cli import main
from rlm.log.logdir import LogDir
from rlm.log.produce import ProduceSpec, produce
from tests.e2e.conftest import start_serve, subprocess_env

CACHE_DIR = Path("build/rlm/index-cache")
#: The processes run in another directory than this checkout's: they import it from here.
ENV = {"PYTHONPATH": str(Path(__file__).resolve().parents[2])}


def test_lookup_beside_serve_keeps_a_private_index_cache_and_a_second_serve_is_refused(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    sqlite_template: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)  # both processes use the default cache directory, relative to it
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
        assert f"{CACHE_DIR} is in use by another remote index cache" in looked_up.stderr
        private = re.search(r"using a temporary one, (\S+), removed at exit", looked_up.stderr)
        assert private is not None, looked_up.stderr
        assert "rlm-index-cache-" in private[1] and not Path(private[1]).exists()

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
