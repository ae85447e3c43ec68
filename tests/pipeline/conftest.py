"""Fixtures of the pipeline tests.

* ``spark``: one SparkSession (``local[2]``) for the whole test session, started the first time a
  test asks for it, so a run without Spark tests never starts a JVM. Every test using it is marked
  ``spark`` (``pytest -m spark`` runs them, ``-m "not spark"`` skips them).
* ``healthy_tier``: a tiered sample log directory (every codec, legacy batches, transactions and
  aborts) per backend pair, built once per session; read-only. ``healthy_tiers`` gives the same
  tiers by backend name.
* ``aws_env``: the S3 credentials the driver's storage reads from the environment (executors get
  them through ``spark.executorEnv``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from rlm.log.produce import ProduceSpec, produce
from tests.metadata_support import drop_postgres_database
from tests.pipeline.spark_conf import finish_archive, session_archive, small_job_conf
from tests.pipeline.tiers import AWS_ENV, Tier, build_tier

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Two topics (CreateTime, LogAppendTime) of two partitions: every codec, legacy v1 batches,
#: transactions committed and aborted; three or four 16 KiB segments per partition.
HEALTHY_SPEC = ProduceSpec(
    topics=2,
    partitions=2,
    records=700,
    segment_bytes=16 * 1024,
    max_batch_records=30,
    legacy_batches=4,
    transaction_ratio=0.3,
    seed=23,
)
BACKENDS = [
    pytest.param("sqlite-fs", id="sqlite-fs"),
    pytest.param("postgres-s3", id="postgres-s3", marks=pytest.mark.postgres),
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """The test session's SparkSession: local[2], the test JVM settings (:mod:`tests.pipeline.spark_conf`),
    S3 test credentials for executors. Its JVM writes the test JVMs' class archive as it exits if
    there is none yet."""
    from rlm.pipeline.spark.session import SparkOptions, build_session

    archive, writing = session_archive()
    conf = (
        *small_job_conf(shuffle_partitions=2, archive_at_exit=writing),
        *((f"spark.executorEnv.{name}", value) for name, value in AWS_ENV.items()),
    )
    session = build_session(SparkOptions(master="local[2]", app_name="rlm tests", conf=conf))
    gateway = session.sparkContext._gateway
    yield session
    session.stop()
    if writing is not None and gateway is not None and gateway.proc is not None:
        finish_archive(gateway.proc, writing, archive)


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in AWS_ENV.items():
        monkeypatch.setenv(name, value)


@pytest.fixture(scope="session")
def postgres_databases() -> Iterator[list[str]]:
    """URLs of the PostgreSQL databases tiers created; dropped at the end of the session."""
    created: list[str] = []
    yield created
    for url in created:
        drop_postgres_database(url)


def make_tier(
    kind: str,
    request: pytest.FixtureRequest,
    directory: Path,
    write_logs: Callable[[Path], object] = lambda logs: produce(logs, HEALTHY_SPEC),
    *,
    copy_errors: int = 0,
) -> Tier:
    """A fresh tier of ``kind`` holding the log directory ``write_logs`` writes (the copy fails on
    ``copy_errors`` partitions)."""
    return build_tier(
        kind,
        directory,
        write_logs,
        copy_errors=copy_errors,
        sqlite_template=request.getfixturevalue("sqlite_template") if kind == "sqlite-fs" else None,
        s3=request.getfixturevalue("moto_s3") if kind == "postgres-s3" else None,
        databases=request.getfixturevalue("postgres_databases"),
    )


@pytest.fixture(scope="session")
def healthy_tiers(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, pytest.FixtureRequest], Tier]:
    """The healthy tier of a backend pair, built the first time it is asked for (for fixtures that
    are not parametrized by backend); tests must not change it."""
    built: dict[str, Tier] = {}

    def healthy(kind: str, request: pytest.FixtureRequest) -> Tier:
        if kind not in built:
            built[kind] = make_tier(kind, request, tmp_path_factory.mktemp(f"healthy-{kind}"))
        return built[kind]

    return healthy


@pytest.fixture(scope="session", params=BACKENDS)
def healthy_tier(
    request: pytest.FixtureRequest, healthy_tiers: Callable[[str, pytest.FixtureRequest], Tier]
) -> Tier:
    """A healthy tier on each backend pair; tests must not change it."""
    return healthy_tiers(request.param, request)
