"""Fixtures shared by the whole suite."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, settings

from rlm.log.model import Codec
from rlm.log.produce import ProduceSpec, ProduceSummary, produce

if TYPE_CHECKING:
    from tests.s3_support import S3Server

#: Tests under this directory run on one pytest-xdist worker (``make test`` runs two): the Spark
#: tests share one SparkSession there, and a module's fixtures that start jobs for all its tests
#: (killed runs) start them once. They take the longest of any unit, so they are sent first.
ONE_WORKER = "tests/pipeline/"

# Property tests are a gate, so the suite draws the same examples on every run (a failure is
# reproducible from a fresh clone) and never judges a test by its speed on a loaded machine.
# `HYPOTHESIS_PROFILE=explore` draws new examples on every run, to look for new failures.
settings.register_profile(
    "rlm", derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("explore", parent=settings.get_profile("rlm"), derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "rlm"))


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """pytest-xdist's scheduling by module (a module's tests on one worker, its fixtures made
    once), with every test under :data:`ONE_WORKER` in one unit of work."""
    from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

    class Scheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return ONE_WORKER if nodeid.startswith(ONE_WORKER) else super()._split_scope(nodeid)

        def _assign_work_unit(self, node: object) -> None:
            if ONE_WORKER in self.workqueue:  # the longest unit goes first
                self.workqueue.move_to_end(ONE_WORKER, last=False)
            super()._assign_work_unit(node)

    return Scheduling(config, log)


SAMPLE_SPEC = ProduceSpec(
    topics=2,
    partitions=2,
    records=3000,
    segment_bytes=64 * 1024,
    max_batch_records=40,
    legacy_batches=6,
    codecs=tuple(Codec),
    seed=11,
)


@pytest.fixture(scope="session")
def sample_logdir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ProduceSummary]:
    """A generated log directory (read-only for tests: copy it before changing anything)."""
    out = tmp_path_factory.mktemp("sample") / "logs"
    summary = produce(out, SAMPLE_SPEC)
    return out, summary


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A migrated PostgreSQL database for the whole session, dropped at its end."""
    from tests.metadata_support import postgres_database  # SQLAlchemy loads only for tests using it

    with postgres_database() as url:
        yield url


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated SQLite file that tests copy instead of migrating their own."""
    from tests.metadata_support import migrated_sqlite_template

    return migrated_sqlite_template(tmp_path_factory.mktemp("sqlite-template"))


@pytest.fixture(scope="session")
def moto_s3() -> Iterator[S3Server]:
    """One moto S3 server for the test session, on a free port of 127.0.0.1."""
    from tests.s3_support import running_moto  # boto3 and moto load only for tests that use S3

    with running_moto() as server:
        yield server


@pytest.fixture(scope="session")
def s3rver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """One s3rver process for the whole session (a second S3 server: see ``tests/s3_support.py``)."""
    from tests.s3_support import running_s3rver  # boto3 and moto load only for tests that use S3

    with running_s3rver(tmp_path_factory.mktemp("s3rver")) as server:
        yield server


@pytest.fixture(params=["moto", "s3rver"])
def s3_server(request: pytest.FixtureRequest) -> S3Server:
    """Each S3 server in turn: moto's (close to AWS) and s3rver."""
    server: S3Server = request.getfixturevalue("moto_s3" if request.param == "moto" else "s3rver")
    return server
