"""``rlm serve --wait-for-broker-id``: a wait that is not a finite number of seconds ≥ 0 is refused
before anything starts, naming the option; it is never waited forever nor taken as no wait."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rlm.cli import main

#: The process runs in another directory than this checkout's: it imports it from here.
ROOT = str(Path(__file__).resolve().parents[2])


@pytest.mark.parametrize("seconds", ["-1", "-0.5"])
def test_a_negative_wait_for_the_broker_id_is_refused_naming_the_option(
    tmp_path: Path, seconds: str, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = tmp_path / "logs"  # no meta.properties: the broker id is not known
    logs.mkdir()
    with pytest.raises(SystemExit) as refused:
        main(["serve", "--log-dirs", str(logs), "--wait-for-broker-id", seconds])
    assert refused.value.code == 2
    assert "--wait-for-broker-id" in capsys.readouterr().err


@pytest.mark.parametrize("seconds", ["nan", "inf"])
def test_a_wait_for_the_broker_id_that_never_ends_is_refused(tmp_path: Path, seconds: str) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "rlm", "serve", "--log-dirs", str(logs), "--wait-for-broker-id", seconds],
            capture_output=True,
            cwd=tmp_path,
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ROOT},
            timeout=20,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"rlm serve --wait-for-broker-id {seconds} waited on instead of refusing it")
    assert done.returncode == 2
    assert b"--wait-for-broker-id" in done.stderr
