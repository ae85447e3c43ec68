"""Readiness over S3 servers: a bucket that does not exist is not ready, and says which bucket.

The probe used to HEAD a key that is never stored: a HEAD answer has no body, so a missing bucket
came back as a bare 404, read as "no such object", and ``/readyz`` said ready while every copy
failed with NoSuchBucket.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry

from api.auth import TokenAuthenticator
from api.rest.app import create_app
from rlm.bootstrap import Runtime, build_runtime
from rlm.config import Settings
from tests.s3_support import S3Server


def runtime_over(s3_server: S3Server, bucket: str, tmp_path: Path, sqlite_template: Path) -> Runtime:
    database = tmp_path / "metadata.db"
    shutil.copyfile(sqlite_template, database)
    settings = Settings(
        metadata_url=f"sqlite:///{database}",
        remote_url=f"s3://{bucket}/tier",
        remote_log_index_cache_dir=tmp_path / "index-cache",
        auth_enabled=False,
    )
    storage = s3_server.storage(bucket, "tier")
    return build_runtime(settings, registry=CollectorRegistry(), storage=storage)


@pytest.fixture
def missing_bucket(
    s3_server: S3Server, tmp_path: Path, sqlite_template: Path
) -> Iterator[tuple[Runtime, str]]:
    bucket = f"rlm-missing-{uuid.uuid4().hex[:12]}"
    runtime = runtime_over(s3_server, bucket, tmp_path, sqlite_template)
    try:
        yield runtime, bucket
    finally:
        runtime.close()


def test_a_bucket_that_does_not_exist_is_not_ready_and_is_named(missing_bucket: tuple[Runtime, str]) -> None:
    runtime, bucket = missing_bucket
    problems = runtime.readiness_problems()
    assert len(problems) == 1 and problems[0].startswith("remote storage"), problems
    assert repr(bucket) in problems[0] and "does not exist" in problems[0], problems
    settings = Settings(auth_enabled=False)
    with TestClient(
        create_app(settings, runtime_=runtime, authenticator=TokenAuthenticator({}, enabled=False))
    ) as client:
        answer = client.get("/readyz")
    assert answer.status_code == 503
    assert answer.json()["problems"] == problems


def test_an_existing_bucket_is_ready(s3_server: S3Server, tmp_path: Path, sqlite_template: Path) -> None:
    runtime = runtime_over(s3_server, s3_server.new_bucket(), tmp_path, sqlite_template)
    try:
        assert runtime.readiness_problems() == []
    finally:
        runtime.close()
