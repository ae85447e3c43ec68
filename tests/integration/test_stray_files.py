"""Files in a partition directory that are not the broker's: every command skips them the same
way, with a warning naming each, and never a traceback."""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from rlm.cli import main
from rlm.log.files import offset_file_offsets
from rlm.log.produce import ProduceSpec, produce

SPEC = ProduceSpec(topics=1, partitions=1, records=600, segment_bytes=12 * 1024, legacy_batches=4, seed=8)
#: Names ending in .log that are no segment: not an offset, negative, 26 digits, not 20 digits,
#: non-ASCII digits and letters, bytes that are not UTF-8.
STRAY_LOGS = (
    "abc.log",
    "-1.log",
    "12345678901234567890123456.log",
    "0000000000000000340.log",
    "٣٤٠.log",
    "ünïcödé.log",
    b"\xff\xfe.log",
)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("strays") / "logs"
    produce(root, SPEC)
    return root


@pytest.fixture
def logs(pristine: Path, tmp_path: Path) -> Path:
    root = tmp_path / "logs"
    shutil.copytree(pristine, root)
    partition = root / "orders-0"
    for name in STRAY_LOGS:
        text = os.fsdecode(name)  # bytes that are not UTF-8 become surrogate escapes
        (partition / text).write_bytes(b"not a segment")
    (partition / "00000000000000099999.log").mkdir()  # a directory named like a segment
    (partition / "abc.index").write_bytes(b"\0" * 8)
    (partition / "00000000000000077777.index").write_bytes(b"\0" * 8)  # no .log of that offset
    (partition / "junk.snapshot").write_bytes(b"x")
    (root / "orders-٣").mkdir()  # a directory named like a partition, with a non-ASCII number
    return root


def _stray_names(logs: Path) -> list[str]:
    """The strays every command must name in a warning (the undecodable one is checked apart)."""
    return [n for n in STRAY_LOGS if isinstance(n, str)] + ["00000000000000099999.log"]


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _warned(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


def test_the_listing_skips_strays_with_a_warning_each(logs: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    offsets = offset_file_offsets(logs / "orders-0", ".log")
    assert offsets == sorted(offsets) and offsets[0] == 0 and 99999 not in offsets and 340 not in offsets
    warned = _warned(caplog)
    for name in _stray_names(logs):
        assert name in warned, name
    assert "\\udcff\\udcfe.log" in warned  # an undecodable name is printed escaped
    assert "not a regular file" in warned and "not written in 20 digits" in warned


@pytest.mark.parametrize(
    "command",
    [
        ("log", "dump", "{p}"),
        ("log", "dump", "{p}", "--records", "--json"),
        ("log", "verify", "{p}"),
        ("log", "verify", "{logs}"),
        ("log", "reindex", "{p}"),
        ("log", "find-offset", "{p}", "--timestamp", "earliest"),
        ("log", "find-offset", "{p}", "--timestamp", "1700000000000"),
    ],
    ids=lambda c: " ".join(c[:2] + c[3:]),
)
def test_every_log_command_skips_strays(
    logs: Path,
    command: tuple[str, ...],
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    args = [a.format(p=logs / "orders-0", logs=logs) for a in command]
    code, out, err = _run(capsys, *args)
    assert code == 0, err
    assert "Traceback" not in err and out
    warned = _warned(caplog)
    for name in _stray_names(logs):
        assert name in warned, (name, warned)


def test_copy_and_lookup_skip_strays(
    logs: Path,
    tmp_path: Path,
    sqlite_template: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.WARNING)
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "m.db"
    shutil.copy(sqlite_template, db)
    settings = ["--log-dirs", str(logs), "--metadata-url", f"sqlite:///{db}", "--remote-url"]
    settings.append((tmp_path / "remote").as_uri())
    (tmp_path / "remote").mkdir()
    code, out, err = _run(capsys, "copy", "--once", "--quiet", *settings)
    assert code == 0, err
    assert "copied" in out
    rows = sqlite3.connect(db).execute("SELECT count(*) FROM rlm_segment").fetchone()
    assert rows is not None and rows[0] > 0
    code, out, err = _run(capsys, "lookup", "orders", "0", "--timestamp", "earliest", *settings)
    assert code == 0, err
    assert '"offset": 0' in out
    warned = _warned(caplog)
    for name in _stray_names(logs):
        assert name in warned, name


def test_a_stray_named_on_the_command_line_is_a_clear_error(
    logs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stray = logs / "orders-0" / "abc.log"
    for command in ("dump", "verify"):
        code, out, err = _run(capsys, "log", command, str(stray))
        assert code == 1
        assert err.startswith(f"rlm: error: '{stray}' is not named the way Kafka names its files") and not out
    code, _, err = _run(capsys, "log", "dump", str(logs / "orders-0" / "00000000000000099999.log"))
    assert code == 1 and "is not a partition directory (expected TOPIC-PARTITION; it is empty)" in err
    code, _, err = _run(capsys, "log", "reindex", str(logs / "orders-٣"))
    assert code == 1 and "is not a partition directory" in err
