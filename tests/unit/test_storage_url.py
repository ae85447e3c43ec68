"""Opening remote storage from a URL (no request is sent)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlm.errors import ConfigError
from rlm.storage.filesystem import FilesystemStorage
from rlm.storage.s3 import S3Storage
from rlm.storage.url import open_storage


def test_s3_url_names_bucket_and_prefix() -> None:
    store = open_storage(
        "s3://tiered-logs/prod/cluster-1/", endpoint_url="http://127.0.0.1:9", region="eu-west-1"
    )
    try:
        assert isinstance(store, S3Storage)
        assert (store.bucket, store.prefix) == ("tiered-logs", "prod/cluster-1")
        assert store.config.endpoint_url == "http://127.0.0.1:9"
        assert "secret" not in repr(store).lower()
    finally:
        store.close()


def test_s3_url_without_prefix() -> None:
    store = open_storage("s3://tiered-logs", region="us-east-1")
    try:
        assert isinstance(store, S3Storage)
        assert (store.bucket, store.prefix) == ("tiered-logs", "")
    finally:
        store.close()


def test_file_url_names_a_directory(tmp_path: Path) -> None:
    store = open_storage(f"file://{tmp_path}/remote")
    assert isinstance(store, FilesystemStorage)
    assert store.root == tmp_path / "remote"
    assert store.root.is_dir()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://example.com/x", "scheme must be s3:// or file://"),
        ("/var/lib/rlm", "scheme must be s3:// or file://"),
        ("s3://", "names no bucket"),
        ("s3:///prefix", "names no bucket"),
        ("s3://bucket/a/../b", "bad S3 key prefix"),
        ("s3://bucket/p?versionId=1", "query or fragment"),
        ("file://host/path", "names a host"),
        ("file:relative/path", "absolute path"),
    ],
)
def test_bad_urls_are_config_errors(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("?", r"\?")):
        open_storage(url)


def test_unknown_or_out_of_range_options_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown S3 storage options: part_size"):
        open_storage("s3://bucket", part_size=5)
    with pytest.raises(ConfigError, match="part_size_bytes must be between"):
        open_storage("s3://bucket", part_size_bytes=1024)
    with pytest.raises(ConfigError, match="takes no options"):
        open_storage(f"file://{tmp_path}", endpoint_url="http://x")
