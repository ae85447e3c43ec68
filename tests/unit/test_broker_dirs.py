"""The broker's log directories listed each on its own (:mod:`rlm.log.broker_dirs`)."""

from __future__ import annotations

import errno
from pathlib import Path

from rlm.log.broker_dirs import OfflineLogDir, list_log_dirs
from rlm.log.dirwriter import LogDirWriter
from rlm.log.logdir import LogDir, PartitionDir
from rlm.log.model import TopicPartition

ORDERS = TopicPartition("orders", 0)
CLICKS = TopicPartition("clicks", 1)


def _log_dir(path: Path, *tps: TopicPartition) -> Path:
    writer = LogDirWriter(path)
    for tp in tps:
        writer.partition(tp.topic, tp.partition)
    writer.close()
    return path


class FailingDisk(LogDir):
    """A log directory whose disk answers EIO to a listing (as a failing disk does)."""

    def partitions(self) -> list[PartitionDir]:
        raise OSError(errno.EIO, "Input/output error", str(self.path))


def test_each_log_directory_is_listed_on_its_own(tmp_path: Path) -> None:
    good = _log_dir(tmp_path / "a", ORDERS)
    failing = _log_dir(tmp_path / "b", CLICKS)
    broken = _log_dir(tmp_path / "c", CLICKS)
    (broken / "meta.properties").unlink()
    (broken / "meta.properties").mkdir()  # cannot be read as a file
    missing = tmp_path / "d"

    found = list_log_dirs([LogDir(good), FailingDisk(failing), LogDir(broken), LogDir(missing)])

    assert [p.tp for p in found.partitions] == [ORDERS]
    assert found.duplicates == {}
    assert [d.path for d in found.offline] == [failing, broken, missing]
    eio, unreadable, gone = (str(d) for d in found.offline)
    assert (
        eio
        == f"log directory {failing} is offline: cannot list it: [Errno 5] Input/output error: '{failing}'"
    )
    assert unreadable.startswith(
        f"log directory {broken} is offline: cannot read {broken / 'meta.properties'}: "
    )
    assert gone == f"log directory {missing} does not exist"
    assert found.offline[2] == OfflineLogDir(missing, gone)


def test_a_partition_in_two_log_directories_is_set_apart(tmp_path: Path) -> None:
    a = _log_dir(tmp_path / "a", ORDERS, CLICKS)
    b = _log_dir(tmp_path / "b", ORDERS)
    unformatted = tmp_path / "c"
    unformatted.mkdir()  # no meta.properties yet: a log directory all the same

    found = list_log_dirs([LogDir(b), LogDir(a), LogDir(unformatted)])

    assert [p.tp for p in found.partitions] == [CLICKS]
    assert {tp: [p.path for p in dirs] for tp, dirs in found.duplicates.items()} == {
        ORDERS: [b / "orders-0", a / "orders-0"]
    }
    assert found.offline == ()


def test_one_log_directory_named_twice_holds_no_partition_twice(tmp_path: Path) -> None:
    a = _log_dir(tmp_path / "a", ORDERS)

    found = list_log_dirs([LogDir(a), LogDir(a)])

    assert [p.tp for p in found.partitions] == [ORDERS]
    assert found.duplicates == {}
