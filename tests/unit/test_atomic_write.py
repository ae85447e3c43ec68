"""atomic_write keeps the owner and mode of the file it replaces, as the broker needs them."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlm.log.files import atomic_write

NOBODY = 65534

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="changing owners takes root")


@contextlib.contextmanager
def _as_nobody() -> Iterator[None]:
    """Act as user and group ``nobody``, an operator who is not root (the effective ids only, so
    that the test process gets root back; the interpreter lives where nobody may not run it)."""
    os.setegid(NOBODY)
    os.seteuid(NOBODY)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)


def _owner_and_mode(path: Path) -> tuple[int, int, int]:
    found = path.stat()
    return found.st_uid, found.st_gid, stat.S_IMODE(found.st_mode)


def test_a_new_file_takes_the_mode_of_the_one_it_replaces(tmp_path: Path) -> None:
    target = tmp_path / "00000000000000000000.index"
    target.write_bytes(b"old")
    target.chmod(0o640)
    atomic_write(target, b"new")
    assert target.read_bytes() == b"new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640


def test_a_file_without_a_predecessor_takes_the_mode_of_like(tmp_path: Path) -> None:
    log = tmp_path / "00000000000000000000.log"
    log.write_bytes(b"")
    log.chmod(0o600)
    atomic_write(tmp_path / "00000000000000000000.index", b"new", like=log)
    assert stat.S_IMODE((tmp_path / "00000000000000000000.index").stat().st_mode) == 0o600
    atomic_write(tmp_path / "other", b"new")  # nothing to take after: the umask decides
    assert (tmp_path / "other").read_bytes() == b"new"


@needs_root
def test_root_gives_the_new_file_the_owner_of_the_old(tmp_path: Path) -> None:
    target = tmp_path / "00000000000000000000.timeindex"
    target.write_bytes(b"old")
    os.chown(target, 4321, 4322)
    target.chmod(0o640)
    atomic_write(target, b"new")
    assert _owner_and_mode(target) == (4321, 4322, 0o640)


@needs_root
def test_an_owner_rewrites_its_file_and_another_user_is_refused() -> None:
    with tempfile.TemporaryDirectory() as name:  # pytest's are root's alone
        directory = Path(name)
        directory.chmod(0o777)  # nobody may create and rename files here
        _rewrite_as_nobody(directory)


def _rewrite_as_nobody(tmp_path: Path) -> None:
    own = tmp_path / "own.index"
    own.write_bytes(b"old")
    os.chown(own, NOBODY, NOBODY)
    own.chmod(0o640)
    with _as_nobody():
        atomic_write(own, b"new")
    assert own.read_bytes() == b"new" and _owner_and_mode(own) == (NOBODY, NOBODY, 0o640)

    roots = tmp_path / "root.index"
    roots.write_bytes(b"old")
    roots.chmod(0o666)
    with _as_nobody(), pytest.raises(PermissionError, match="cannot give the new file the owner 0:0"):
        atomic_write(roots, b"new")
    assert roots.read_bytes() == b"old" and _owner_and_mode(roots) == (0, 0, 0o666)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["own.index", "root.index"]
