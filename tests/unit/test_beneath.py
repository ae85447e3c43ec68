"""Opening files beneath a directory: with openat2, and with the realpath fallback, the same answers."""

from __future__ import annotations

import ctypes
import errno
import gc
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlm.errors import InvalidObjectKeyError, NotFoundError, StorageError
from rlm.storage import beneath
from rlm.storage.beneath import Beneath, OutsideError
from rlm.storage.filesystem import FilesystemStorage


@pytest.fixture(params=["openat2", "realpath"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Each test runs with the kernel's check and with the fallback."""
    if request.param == "openat2":
        if beneath._syscall is None:
            pytest.skip("openat2 is not available on this platform (the fallback is tested)")
        monkeypatch.setattr(beneath._support, "usable", True)
    else:
        monkeypatch.setattr(beneath._support, "usable", False)
    yield request.param
    if request.param == "openat2":
        assert beneath._support.usable, "the kernel refused openat2: only the fallback was tested"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """``root/`` with ``a/b.txt``, next to ``outside/secret.txt``."""
    root = tmp_path / "root"
    (root / "a").mkdir(parents=True)
    (root / "a" / "b.txt").write_bytes(b"inside")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_bytes(b"secret")
    return root


def _read(under: Beneath, relative: str) -> bytes:
    fd = under.open(relative)
    try:
        return os.read(fd, 100)
    finally:
        os.close(fd)


def test_opens_files_under_the_directory(mode: str, tree: Path) -> None:
    under = Beneath(tree)
    assert _read(under, "a/b.txt") == b"inside"
    with pytest.raises(FileNotFoundError):
        under.open("a/missing")
    with pytest.raises(NotADirectoryError):
        under.open("a/b.txt/c")


def test_a_relative_symlink_that_stays_inside_is_followed(mode: str, tree: Path) -> None:
    os.symlink("a/b.txt", tree / "link")
    os.symlink("../a", tree / "a" / "self")
    under = Beneath(tree)
    assert _read(under, "link") == b"inside"
    assert _read(under, "a/self/b.txt") == b"inside"


@pytest.mark.parametrize("target", ["../../outside/secret.txt", "ABSOLUTE"])
def test_a_symlink_out_of_the_directory_is_refused(mode: str, tree: Path, target: str) -> None:
    if target == "ABSOLUTE":
        target = str(tree.parent / "outside" / "secret.txt")
    os.symlink(target, tree / "a" / "escape")
    os.symlink(tree.parent / "outside", tree / "dir")
    under = Beneath(tree)
    for relative in ("a/escape", "dir/secret.txt"):
        with pytest.raises(OutsideError, match="resolves outside") as raised:
            under.open(relative)
        assert raised.value.errno == errno.EXDEV


def test_a_replaced_directory_is_opened_anew(mode: str, tree: Path) -> None:
    under = Beneath(tree)
    assert _read(under, "a/b.txt") == b"inside"
    shutil.rmtree(tree)
    (tree / "a").mkdir(parents=True)
    (tree / "a" / "b.txt").write_bytes(b"new")
    assert _read(under, "a/b.txt") == b"new"
    under.close()
    under.close()
    assert _read(under, "a/b.txt") == b"new"  # taken again after close


def test_a_removed_directory_reads_as_missing(mode: str, tree: Path) -> None:
    under = Beneath(tree)
    assert _read(under, "a/b.txt") == b"inside"
    shutil.rmtree(tree)
    with pytest.raises(FileNotFoundError):
        under.open("a/b.txt")


def test_the_filesystem_store_reads_through_it(mode: str, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x").write_bytes(b"secret")
    with FilesystemStorage(tmp_path / "root") as store:
        store.put_object("p/seg.log", b"0123456789")
        assert store.read_range("p/seg.log", 2, 3) == b"234"
        os.symlink(outside, tmp_path / "root" / "link")
        with pytest.raises(InvalidObjectKeyError, match="resolves outside"):
            store.read_range("link/x", 0, 6)
        with pytest.raises(NotFoundError):
            store.read_range("p", 0, 1)  # a directory: a prefix, not an object
        with pytest.raises(NotFoundError):
            store.read_range("p/other.log", 0, 1)
        assert store.object_size("p/seg.log") == 10
        assert store.object_size("p") is None
        assert store.object_size("p/other.log") is None
        with pytest.raises(InvalidObjectKeyError, match="resolves outside"):
            store.object_size("link/x")


def test_a_symlink_loop_is_a_storage_error_naming_the_key(mode: str, tmp_path: Path) -> None:
    with FilesystemStorage(tmp_path / "root") as store:
        (tmp_path / "root" / "p").mkdir()
        os.symlink("loop", tmp_path / "root" / "p" / "loop")
        expected = "cannot read 'p/loop': Too many levels of symbolic links"
        with pytest.raises(StorageError, match=expected) as raised:
            store.read_range("p/loop", 0, 1)
        assert not isinstance(raised.value, NotFoundError)


def test_an_absolute_symlink_back_inside(mode: str, tree: Path) -> None:
    """The one documented difference: the kernel's check refuses every absolute symlink."""
    os.symlink(tree / "a" / "b.txt", tree / "absolute")
    under = Beneath(tree)
    if mode == "openat2":
        with pytest.raises(OutsideError):
            under.open("absolute")
    else:
        assert _read(under, "absolute") == b"inside"


@pytest.mark.parametrize("code", [errno.ENOSYS, errno.EPERM, errno.EINVAL])
def test_where_the_kernel_refuses_openat2_the_fallback_answers(
    tree: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    calls: list[int] = []

    def refused(*args: object) -> int:
        calls.append(code)
        ctypes.set_errno(code)
        return -1

    monkeypatch.setattr(beneath, "_syscall", refused)
    monkeypatch.setattr(beneath._support, "usable", True)
    os.symlink(tree.parent / "outside", tree / "dir")
    under = Beneath(tree)
    assert _read(under, "a/b.txt") == b"inside"
    assert not beneath._support.usable
    with pytest.raises(OutsideError):
        under.open("dir/secret.txt")
    assert calls == [code]  # asked once, then never again


def test_a_rename_racing_the_resolution_is_retried(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if beneath._syscall is None:
        pytest.skip("openat2 is not available on this platform: opens use the realpath check, with no retry")
    real = beneath._syscall
    results = iter([errno.EAGAIN, errno.EAGAIN])

    def racing(*args: object) -> int:
        code = next(results, None)
        if code is None:
            return real(*args)
        ctypes.set_errno(code)
        return -1

    monkeypatch.setattr(beneath, "_syscall", racing)
    monkeypatch.setattr(beneath._support, "usable", True)
    assert _read(Beneath(tree), "a/b.txt") == b"inside"
    assert beneath._support.usable


def test_the_directory_is_closed_only_after_the_opens_using_it(tree: Path) -> None:
    under = Beneath(tree)
    held = under._take()
    under.close()
    os.fstat(held.fd)  # still open: an open in flight resolves against it
    under._give_back(held)
    with pytest.raises(OSError) as raised:
        os.fstat(held.fd)
    assert raised.value.errno == errno.EBADF
    assert _read(under, "a/b.txt") == b"inside"


def test_no_descriptor_outlives_its_opener(mode: str, tree: Path) -> None:
    gc.collect()
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(50):
        assert _read(Beneath(tree), "a/b.txt") == b"inside"
    gc.collect()
    assert len(os.listdir("/proc/self/fd")) == before
