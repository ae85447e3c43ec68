"""Whether a broker runs on a log directory: it holds the directory's ``.lock``.

Kafka's ``LogManager`` locks ``<log dir>/.lock`` at startup with ``FileChannel.tryLock`` and
holds it until it stops; on Linux the JVM takes that lock with ``fcntl`` (a POSIX record lock on
the whole file), which the kernel releases when the process ends, so a lock found held is a
broker running. A tool that writes the broker's files must not run beside it: the broker keeps
its indexes open and mapped, and writes them itself.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from rlm.errors import BrokerRunningError

LOCK_FILE = ".lock"


def broker_holds_lock(log_dir: Path) -> bool:
    """Whether another process holds ``log_dir``'s ``.lock`` (a broker runs on it).

    A shared lock is asked for, without waiting, on a descriptor opened read-only: it conflicts
    with the broker's exclusive lock and needs no write access to the file. A directory without
    ``.lock`` has no broker running on it.

    Raises:
        OSError: The file cannot be opened or locked for another reason.
    """
    try:
        fd = os.open(log_dir / LOCK_FILE, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            return True
        raise
    finally:
        os.close(fd)  # releases the lock, if it was taken
    return False


def ensure_broker_stopped(log_dir: Path) -> None:
    """Raise unless ``log_dir`` is free of a running broker.

    Raises:
        BrokerRunningError: A process holds ``log_dir``'s ``.lock``.
    """
    if broker_holds_lock(log_dir):
        raise BrokerRunningError(
            f"a broker runs on {log_dir} (it holds {log_dir / LOCK_FILE}): stop the broker first"
        )
