"""The copier and retention under faults: killed processes, a failing S3, a restarted PostgreSQL,
a second sidecar, a corrupt segment.

After every fault the same invariants must hold once a healthy pass has run
(:func:`tests.tiering_support.invariant_problems`): finished segments have all their objects,
intact; every replicated offset of a rolled segment is tiered; no object is left that no row
points to; no offset is tiered twice by one copier. After a kill, no unfinished put is left
either: no S3 multipart upload, no filesystem temporary file.

Kills are real: ``crash_child.py`` runs the pass in its own process and sends itself SIGKILL at
the N-th report of a step (or the N-th S3 request of an operation), so nothing of the dying pass
runs after that point: no ``except``, no ``finally``, no rollback of what it had done.
"""

from __future__ import annotations

import dataclasses
import itertools
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from _pytest.mark import ParameterSet

from metadata import SqlMetadataStore, upgrade
from rlm.config import Settings, TopicSettings
from rlm.errors import CorruptRecordError, MetadataUnavailableError, StaleLeaseError
from rlm.log.logdir import LogDir, PartitionDir
from rlm.log.model import V2_HEADER_SIZE
from rlm.log.produce import ProduceSpec, produce
from rlm.metastore.model import Lease, SegmentState, TopicPartition
from rlm.metrics import Metrics
from rlm.storage.filesystem import FilesystemStorage
from rlm.tiering.copier import Copier, CopyOutcome
from rlm.tiering.deletion import Step, no_step
from rlm.tiering.leases import LeaseKeeper
from tests.clock import FakeClock
from tests.s3_proxy import ProxyFault, S3Proxy
from tests.s3_support import TEST_S3_CONFIG
from tests.storage_faults import SERVER_ERRORS, FaultInjector
from tests.tiering_support import (
    COPY_STEPS,
    DELETE_STEPS,
    RETENTION_STEPS,
    Backend,
    SegmentPlan,
    Tiering,
    all_rows,
    assert_invariants,
    eligible_segments,
    make_backend,
    set_high_watermarks,
    set_log_start_offsets,
    tp_of,
    write_scripted_log_dir,
)

CHILD = Path(__file__).with_name("crash_child.py")
REPO = Path(__file__).resolve().parents[2]
#: Two partitions (CreateTime with legacy batches, and LogAppendTime) of about six segments each.
SPEC = ProduceSpec(
    topics=2,
    partitions=1,
    records=1200,
    segment_bytes=16 * 1024,
    max_batch_records=30,
    legacy_batches=3,
    seed=23,
)
TieringFactory = Callable[..., Tiering]


def _kills(
    steps: tuple[str, ...], on_postgres_s3: tuple[str, ...], on_s3rver: tuple[str, ...] = ()
) -> list[ParameterSet]:
    """Every step on SQLite + filesystem; some on PostgreSQL + S3 (moto), and on SQLite + s3rver."""
    return (
        [pytest.param("sqlite-fs", step, id=f"sqlite-fs-{step}") for step in steps]
        + [
            pytest.param("postgres-s3", step, id=f"postgres-s3-{step}", marks=pytest.mark.postgres)
            for step in on_postgres_s3
        ]
        + [pytest.param("sqlite-s3rver", step, id=f"sqlite-s3rver-{step}") for step in on_s3rver]
    )


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    path = tmp_path / "logs"
    produce(path, SPEC)
    return path


def run_child(
    backend: Backend,
    log_dir: Path,
    *,
    job: str = "copy",
    kill_at_step: str | None = None,
    kill_at_request: str | None = None,
    kill_in_put: bool = False,
    nth: int = 1,
    threads: int = 2,
) -> subprocess.CompletedProcess[str]:
    """Run one pass of ``job`` in a sidecar process of its own; it dies on the cue given."""
    args = [
        sys.executable,
        str(CHILD),
        "--log-dir",
        str(log_dir),
        "--metadata-url",
        backend.metadata_url,
        "--remote-url",
        backend.remote_url,
        "--job",
        job,
        "--nth",
        str(nth),
        "--threads",
        str(threads),
    ]
    if backend.s3 is not None:
        args += ["--s3-endpoint", backend.s3.endpoint_url, "--s3-access-key", backend.s3.access_key_id]
        args += ["--s3-addressing-style", backend.s3.addressing_style]
    if kill_at_step is not None:
        args += ["--kill-at-step", kill_at_step]
    if kill_at_request is not None:
        args += ["--kill-at-request", kill_at_request]
    if kill_in_put:
        args.append("--kill-in-put")
    return subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=REPO, check=False)


def assert_killed(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == -signal.SIGKILL, (
        f"the sidecar was not killed (exit {result.returncode}):\n{result.stdout}\n{result.stderr}"
    )


def _states(tiering: Tiering) -> set[SegmentState]:
    return {row.state for row in all_rows(tiering.store, map(tp_of, tiering.partitions()))}


def _recover(tiering: Tiering) -> list[CopyOutcome]:
    """A healthy sidecar's pass (the same broker, restarted): it must succeed everywhere."""
    outcomes = tiering.copier().run_once()
    assert [o.error for o in outcomes] == [None] * len(outcomes)
    return outcomes


# -- killed at every step -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pair", "step"),
    _kills(COPY_STEPS, ("log_uploaded", "copy_finished"), ("indexes_uploaded",)),
)
def test_a_copy_killed_at_any_step_is_recovered(
    pair: str,
    step: str,
    request: pytest.FixtureRequest,
    tiering_factory: TieringFactory,
    tmp_path: Path,
    log_dir: Path,
) -> None:
    backend = make_backend(pair, request, tmp_path)
    tiering = tiering_factory(backend, log_dir)

    assert_killed(run_child(backend, log_dir, kill_at_step=step, nth=3))

    if step != "copy_finished":  # the kill left the copy under way
        assert SegmentState.COPY_SEGMENT_STARTED in _states(tiering)
    outcomes = _recover(tiering)
    if step != "copy_finished":
        assert sum(o.cleaned_segments for o in outcomes) >= 1
    assert_invariants(tiering.store, tiering.storage, [log_dir])
    assert backend.unfinished_puts() == []


def _tier_then_expire(tiering: Tiering, log_dir: Path) -> dict[TopicPartition, int]:
    """Tier everything, then move each partition's log start offset into its fourth segment."""
    _recover(tiering)
    starts = {tp_of(p): p.rolled_segments()[3].base_offset + 1 for p in tiering.partitions()}
    set_log_start_offsets(log_dir, starts)
    return starts


@pytest.mark.parametrize(
    ("pair", "step"),
    _kills(RETENTION_STEPS, ("log_start_advanced", "log_deleted")),
)
def test_a_retention_pass_killed_at_any_step_is_recovered(
    pair: str,
    step: str,
    request: pytest.FixtureRequest,
    tiering_factory: TieringFactory,
    tmp_path: Path,
    log_dir: Path,
) -> None:
    backend = make_backend(pair, request, tmp_path)
    tiering = tiering_factory(backend, log_dir, remote_log_start_offset_from_broker=True)
    starts = _tier_then_expire(tiering, log_dir)

    assert_killed(run_child(backend, log_dir, job="retention", kill_at_step=step, nth=2))

    tiering.restart()  # the sidecar that tiered everything was restarted as the child
    outcomes = tiering.retention().run_once()
    assert [o.error for o in outcomes] == [None, None]
    _recover(tiering)
    assert_invariants(tiering.store, tiering.storage, [log_dir])
    for tp, start in starts.items():
        expired = [r for r in tiering.segments(tp) if r.end_offset < start]
        assert len(expired) == 3
        assert {r.state for r in expired} == {SegmentState.DELETE_SEGMENT_FINISHED}


@pytest.mark.parametrize("step", DELETE_STEPS)
def test_a_cleanup_killed_at_any_step_is_recovered(
    step: str,
    request: pytest.FixtureRequest,
    tiering_factory: TieringFactory,
    tmp_path: Path,
    log_dir: Path,
) -> None:
    backend = make_backend("sqlite-fs", request, tmp_path)
    tiering = tiering_factory(backend, log_dir)
    assert_killed(run_child(backend, log_dir, kill_at_step="indexes_uploaded", nth=2))

    # The restarted sidecar dies again while deleting what the first one left unfinished.
    assert_killed(run_child(backend, log_dir, kill_at_step=step, nth=1))

    _recover(tiering)
    assert_invariants(tiering.store, tiering.storage, [log_dir])
    assert backend.unfinished_puts() == []


# -- killed in the middle of a multipart upload -------------------------------------------------


@pytest.mark.parametrize("pair", ["sqlite-s3", "sqlite-s3rver"])
def test_a_copy_killed_during_a_multipart_upload_is_recovered(
    pair: str,
    request: pytest.FixtureRequest,
    tiering_factory: TieringFactory,
    tmp_path: Path,
) -> None:
    backend = make_backend(pair, request, tmp_path)
    assert backend.s3 is not None and backend.bucket is not None
    log_dir = tmp_path / "logs"
    tp = TopicPartition("orders", 0)
    ts = 1_700_000_000_000
    # Segment 1 is about 7 MiB: two parts of 5 MiB (the smallest S3 allows) or more.
    plans = [
        SegmentPlan(20, ts),
        SegmentPlan(350, ts + 1, batch_records=5, value_bytes=40_000),
        SegmentPlan(20, ts + 2),
    ]
    write_scripted_log_dir(log_dir, {tp: plans})
    big = LogDir(log_dir).partition(tp.topic, tp.partition).rolled_segments()[1]
    assert big.size() > 6 * 1024 * 1024
    tiering = tiering_factory(backend, log_dir)

    child = run_child(backend, log_dir, kill_at_request="UploadPart", nth=2)
    assert_killed(child)

    rows = tiering.segments(tp)
    assert [(r.start_offset, r.state) for r in rows] == [
        (0, SegmentState.COPY_SEGMENT_FINISHED),
        (big.base_offset, SegmentState.COPY_SEGMENT_STARTED),
    ], child.stderr
    abandoned = rows[1]
    # S3 keeps the parts of an upload whose uploader died; its id was recorded before any part.
    assert backend.unfinished_puts() == [f"tier/{abandoned.layout.log_key}"]
    (recorded,) = tiering.store.pending_uploads(abandoned.segment_id)
    assert recorded.key == abandoned.layout.log_key
    # Neither server lists uploads here: the cleanup aborts the recorded one by its id.
    with S3Proxy(backend.s3.endpoint_url) as proxy:
        proxy.inject(ProxyFault.NOT_IMPLEMENTED, "ListMultipartUploads")
        tiering.storage.close()
        tiering.storage = backend.s3.storage(
            backend.bucket, "tier", events=tiering.metrics, endpoint_url=proxy.endpoint_url
        )
        (outcome,) = _recover(tiering)
        aborts = proxy.exchanges_of("AbortMultipartUpload")

    assert outcome.cleaned_segments == 1
    assert outcome.copied_segments == 2
    assert_invariants(tiering.store, tiering.storage, [log_dir])  # each segment finished once, no orphan
    assert tiering.store.pending_uploads(abandoned.segment_id) == []
    assert aborts[0].query["uploadId"] == [recorded.upload_id]

    def refused(operation: str) -> float:
        labels = {"operation": operation}
        return tiering.registry.get_sample_value("rlm_storage_optional_call_failures_total", labels) or 0

    assert refused("ListMultipartUploads") >= 1  # warned and counted, never in the way
    if backend.s3.aborts_uploads:
        assert backend.unfinished_puts() == []
        assert refused("AbortMultipartUpload") == 0
    else:  # s3rver refuses the abort too: the upload is left to the bucket's lifecycle rule
        assert backend.unfinished_puts() == [f"tier/{abandoned.layout.log_key}"]
        assert refused("AbortMultipartUpload") >= 1
    assert [(o.error, o.copied_segments) for o in tiering.copier().run_once()] == [(None, 0)]


def test_a_copy_killed_in_the_middle_of_a_filesystem_put_is_recovered(
    request: pytest.FixtureRequest,
    tiering_factory: TieringFactory,
    tmp_path: Path,
    log_dir: Path,
) -> None:
    backend = make_backend("sqlite-fs", request, tmp_path)
    remote = Path(backend.remote_url.removeprefix("file://"))
    tiering = tiering_factory(backend, log_dir)

    # One partition at a time: the third .log put of the first partition dies half done.
    assert_killed(run_child(backend, log_dir, kill_in_put=True, nth=3, threads=1))

    (leftover,) = remote.rglob("*.rlm-tmp")  # the put's temporary file, never renamed into place
    first = tp_of(LogDir(log_dir).partitions()[0])
    assert [r.state for r in tiering.segments(first)] == [
        SegmentState.COPY_SEGMENT_FINISHED,
        SegmentState.COPY_SEGMENT_FINISHED,
        SegmentState.COPY_SEGMENT_STARTED,
    ]
    abandoned = tiering.segments(first)[2].layout.log_key
    assert leftover.parent == remote / abandoned.rpartition("/")[0]
    assert leftover.name.startswith(f".{abandoned.rpartition('/')[2]}.")
    assert tiering.storage.object_size(abandoned) is None
    _recover(tiering)
    assert_invariants(tiering.store, tiering.storage, [log_dir])
    # Listings skip temporary files; the cleanup of the copy removes its put's.
    assert backend.unfinished_puts() == []


# -- a fifth of S3 requests failing -------------------------------------------------------------


def test_everything_is_tiered_and_intact_when_a_fifth_of_s3_requests_fail(
    request: pytest.FixtureRequest,
    tiering_factory: TieringFactory,
    tmp_path: Path,
) -> None:
    log_dir = tmp_path / "logs"
    produce(log_dir, ProduceSpec(topics=2, partitions=2, records=1500, segment_bytes=16 * 1024, seed=3))
    backend = make_backend("sqlite-s3", request, tmp_path)
    tiering = tiering_factory(backend, log_dir, remote_log_start_offset_from_broker=True)
    assert backend.s3 is not None
    # Each operation's faults drawn on their own: the copier's parallel part uploads do not move
    # which of retention's DeleteObjects requests fail.
    faults = FaultInjector(rate=0.2, faults=SERVER_ERRORS, per_operation=True, seed=20261132)
    session = backend.s3.session()
    faults.install(session)
    tiering.storage.close()
    tiering.storage = backend.open_storage(session=session)
    try:
        outcomes = tiering.copier().run_once()
        assert [o.error for o in outcomes] == [None] * 4
        starts = {tp_of(p): p.rolled_segments()[1].base_offset for p in tiering.partitions()}
        set_log_start_offsets(log_dir, starts)
        expired = tiering.retention().run_once()
        assert [(o.error, o.deleted_segments) for o in expired] == [(None, 1)] * 4
    finally:
        faults.rate = 0.0
        faults.close()
    assert faults.total_injected >= 20
    assert set(faults.injected) == set(SERVER_ERRORS)
    assert {"PutObject", "HeadObject", "DeleteObjects"} <= set(faults.injected_by_operation)
    assert_invariants(tiering.store, tiering.storage, [log_dir])
    assert backend.s3.unfinished_uploads(backend.bucket or "") == []


# -- PostgreSQL restarted -----------------------------------------------------------------------

PG_BIN = Path("/usr/lib/postgresql/15/bin")


@dataclass
class PrivateCluster:
    """A PostgreSQL cluster of this test alone, run by the ``postgres`` user on a free port."""

    data: Path
    port: int

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *command: str) -> None:
        subprocess.run(
            ["runuser", "-u", "postgres", "--", *command], check=True, capture_output=True, timeout=120
        )

    def start(self) -> None:
        options = f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1 -c fsync=off"
        log = str(self.data / "log")
        self._run(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-o", options, "-l", log, "-w", "start")

    def stop(self) -> None:
        self._run(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def private_postgres() -> Iterator[PrivateCluster]:
    """A fresh cluster (not the shared server: this test stops and starts it)."""
    if not (PG_BIN / "initdb").exists() or shutil.which("runuser") is None:
        pytest.fail(f"a private PostgreSQL cluster needs {PG_BIN}/initdb and runuser")
    root = Path(tempfile.mkdtemp(prefix="rlm-pg-"))
    shutil.chown(root, "postgres", "postgres")
    cluster = PrivateCluster(root / "data", _free_port())
    subprocess.run(
        ["runuser", "-u", "postgres", "--", str(PG_BIN / "initdb"), "-D", str(cluster.data), "-A", "trust",
         "-U", "postgres", "--no-sync"],
        check=True,
        capture_output=True,
        timeout=120,
    )  # fmt: skip
    cluster.start()
    try:
        yield cluster
    finally:
        subprocess.run(
            ["runuser", "-u", "postgres", "--", str(PG_BIN / "pg_ctl"), "-D", str(cluster.data), "-m",
             "immediate", "stop"],
            capture_output=True,
            timeout=120,
            check=False,
        )  # fmt: skip
        shutil.rmtree(root, ignore_errors=True)


@dataclass
class CopierLoop:
    """Copier passes back to back on a thread, as ``rlm copy`` runs them; every pass is kept."""

    copier: Copier
    passes: list[list[CopyOutcome]] = field(default_factory=list)
    changed: threading.Condition = field(default_factory=threading.Condition)
    stopping: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self._run, name="copier-loop")

    def _run(self) -> None:
        while not self.stopping.is_set():
            outcomes = self.copier.run_once()
            with self.changed:
                self.passes.append(outcomes)
                self.changed.notify_all()
            self.stopping.wait(0.01)  # the loop's interval

    def wait_for_pass(self, predicate: Callable[[list[CopyOutcome]], bool], *, after: int = 0) -> int:
        """Wait for a pass, numbered from ``after`` on, that satisfies ``predicate``; its number."""

        def found() -> int | None:
            return next((i for i in range(after, len(self.passes)) if predicate(self.passes[i])), None)

        with self.changed:
            assert self.changed.wait_for(lambda: found() is not None, timeout=90), (
                f"no such pass among {len(self.passes)}: last {self.passes[-1:]}"
            )
            number = found()
            assert number is not None
            return number


@pytest.mark.postgres
def test_the_copier_loop_recovers_by_itself_when_postgres_restarts(
    private_postgres: PrivateCluster, tmp_path: Path, log_dir: Path
) -> None:
    upgrade(private_postgres.url)
    store = SqlMetadataStore.open(private_postgres.url)
    storage = FilesystemStorage(tmp_path / "remote")
    config = Settings(
        log_dirs=(log_dir,),
        broker_id=1,
        metadata_url=private_postgres.url,
        remote_url=(tmp_path / "remote").as_uri(),
        topic_defaults=TopicSettings(retention_ms=-1),
    )
    reached, resume = threading.Event(), threading.Event()
    uploads = itertools.count(1)

    def pause_mid_pass(name: str) -> None:
        # At the second .log uploaded, its copy not finished yet, the database goes away.
        if name == "log_uploaded" and next(uploads) == 2:
            reached.set()
            assert resume.wait(60)

    loop = CopierLoop(Copier(config, store, storage, Metrics(), step=pause_mid_pass))
    loop.thread.start()
    try:
        assert reached.wait(60)
        private_postgres.stop()
        interrupted = len(loop.passes)  # the pass under way: it cannot finish its copies either
        resume.set()
        down = loop.wait_for_pass(
            lambda p: all(isinstance(o.error, MetadataUnavailableError) for o in p), after=interrupted + 1
        )
        private_postgres.start()
        healthy = loop.wait_for_pass(lambda p: all(o.error is None for o in p), after=down + 1)
    finally:
        resume.set()
        loop.stopping.set()
        loop.thread.join(60)
    assert any(o.error is not None for o in loop.passes[interrupted])  # the paused copy failed
    summary = [[(o.copied_segments, o.cleaned_segments, repr(o.error)) for o in p] for p in loop.passes]
    # The copy the stop interrupted was cleaned up once the database was back.
    cleaned = sum(o.cleaned_segments for p in loop.passes[down + 1 : healthy + 1] for o in p)
    assert cleaned >= 1, summary
    assert_invariants(store, storage, [log_dir])
    store.close()


# -- two sidecars on one partition --------------------------------------------------------------


@dataclass
class Sidecar:
    """One broker's copier, with its own connections to the shared store and storage."""

    copier: Copier
    store: SqlMetadataStore


@dataclass
class Sidecars:
    """Sidecars of several brokers over one log directory, store and storage, on one clock."""

    backend: Backend
    log_dir: Path
    clock: FakeClock[int] = field(default_factory=FakeClock)
    stores: list[SqlMetadataStore] = field(default_factory=list)

    def start(self, broker_id: int, step: Step = no_step) -> Sidecar:
        store = self.backend.open_store(self.clock)
        self.stores.append(store)
        settings = self.backend.settings(self.log_dir, broker_id=broker_id)
        copier = Copier(settings, store, self.backend.open_storage(), Metrics(), clock=self.clock, step=step)
        return Sidecar(copier, store)


@pytest.fixture
def sidecars(request: pytest.FixtureRequest, tmp_path: Path, log_dir: Path) -> Iterator[Sidecars]:
    group = Sidecars(make_backend("sqlite-fs", request, tmp_path), log_dir)
    yield group
    for store in group.stores:
        store.close()


@pytest.fixture
def sqlite_fs(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return make_backend("sqlite-fs", request, tmp_path)


def test_only_the_lease_holder_copies_and_another_takes_over_when_it_expires(
    sidecars: Sidecars, log_dir: Path
) -> None:
    clock = sidecars.clock
    partitions = LogDir(log_dir).partitions()
    set_high_watermarks(log_dir, {tp_of(p): p.rolled_segments()[2].base_offset for p in partitions})
    first, second = sidecars.start(1), sidecars.start(2)

    assert [o.copied_segments for o in first.copier.run_once()] == [2, 2]
    assert [o.skipped for o in second.copier.run_once()] == ["the copy lease is held by broker 1"] * 2
    set_high_watermarks(log_dir, {tp_of(p): p.log_end_offset() for p in partitions})
    clock.advance(60_001)  # broker 1 stopped renewing: its leases expire
    taken = second.copier.run_once()
    assert all(o.copied_segments >= 2 and o.error is None for o in taken)
    assert [o.skipped for o in first.copier.run_once()] == ["the copy lease is held by broker 2"] * 2

    for partition in partitions:
        rows = first.store.list_segments(tp_of(partition), states=[SegmentState.COPY_SEGMENT_FINISHED])
        assert [r.broker_id for r in rows] == [1, 1] + [2] * (len(eligible_segments(partition)) - 2)
    assert_invariants(first.store, first.copier.storage, [log_dir])


def test_a_long_backlog_keeps_its_lease_by_renewing_it_between_segments(
    sidecars: Sidecars, log_dir: Path
) -> None:
    clock = sidecars.clock
    partition = LogDir(log_dir).partitions()[0]
    second = sidecars.start(2)
    other = LeaseKeeper(second.store, 2, 60_000)
    refused: list[bool] = []

    def slow_copy(name: str) -> None:
        # Each copy takes 40 s of a 60 s lease; broker 2 tries to take the partition after each.
        if name == "copy_finished":
            clock.advance(40_000)
            refused.append(other.hold(tp_of(partition)) is None)

    first = sidecars.start(1, step=slow_copy)

    outcome = first.copier.copy_partition(partition)

    assert outcome.error is None
    assert outcome.copied_segments == len(eligible_segments(partition)) >= 4
    assert refused == [True] * outcome.copied_segments


def test_a_stale_holder_cannot_finish_its_copy_and_leaves_no_objects(
    sidecars: Sidecars, log_dir: Path
) -> None:
    clock = sidecars.clock
    partition = LogDir(log_dir).partitions()[0]
    second = sidecars.start(2)
    taken: list[CopyOutcome] = []

    def paused_too_long(name: str) -> None:
        # Broker 1 stalls after uploading its first .log; its lease expires and broker 2 takes
        # the partition over, cleans up broker 1's copy under way and copies everything itself.
        if name == "log_uploaded" and not taken:
            clock.advance(60_001)
            taken.append(second.copier.copy_partition(partition))

    first = sidecars.start(1, step=paused_too_long)

    outcome = first.copier.copy_partition(partition)

    assert isinstance(outcome.error, StaleLeaseError)
    assert taken[0].error is None and taken[0].cleaned_segments == 1
    rows = list(first.store.list_segments(tp_of(partition)))
    assert {(r.broker_id, r.state) for r in rows} == {
        (1, SegmentState.DELETE_SEGMENT_FINISHED),
        (2, SegmentState.COPY_SEGMENT_FINISHED),
    }
    assert_invariants(first.store, first.copier.storage, [log_dir], untiered=_others(log_dir, partition))


def test_a_stale_holder_cannot_add_segments(sidecars: Sidecars, log_dir: Path) -> None:
    clock = sidecars.clock
    partition = LogDir(log_dir).partitions()[0]
    tp = tp_of(partition)
    second = sidecars.start(2)
    other = LeaseKeeper(second.store, 2, 60_000)

    def lose_the_lease(name: str) -> None:
        if name == "copy_finished" and other.holder(tp) == "broker 1":
            clock.advance(60_001)
            assert other.hold(tp) is not None  # broker 2 takes over, copies nothing yet

    first = sidecars.start(1, step=lose_the_lease)

    outcome = first.copier.copy_partition(partition)

    assert isinstance(outcome.error, StaleLeaseError)
    (only,) = first.store.list_segments(tp)
    assert (only.broker_id, only.state) == (1, SegmentState.COPY_SEGMENT_FINISHED)
    assert sorted(first.copier.storage.list_keys("")) == sorted([only.layout.log_key, only.layout.index_key])
    # Broker 2's own pass carries on from broker 1's last copy.
    other.release_all()
    resumed = second.copier.copy_partition(partition)
    assert resumed.copied_segments == len(eligible_segments(partition)) - 1
    assert_invariants(first.store, first.copier.storage, [log_dir], untiered=_others(log_dir, partition))


def test_a_holder_that_lost_its_lease_cannot_record_an_upload_and_aborts_it(
    request: pytest.FixtureRequest,
    tiering_factory: TieringFactory,
    tmp_path: Path,
    log_dir: Path,
) -> None:
    backend = make_backend("sqlite-s3", request, tmp_path)
    tiering = tiering_factory(backend, log_dir)
    tiering.storage.close()  # every put a multipart upload (of one part)
    tiering.storage = backend.open_storage(
        config=dataclasses.replace(TEST_S3_CONFIG, multipart_threshold_bytes=1), events=tiering.metrics
    )
    partition = LogDir(log_dir).partitions()[0]
    other = LeaseKeeper(tiering.store, 2, 60_000)
    taken: list[Lease | None] = []

    def lose_the_lease(name: str) -> None:
        # Broker 1 recorded its copy, then stalls: broker 2 takes the partition before any upload.
        if name == "copy_started" and not taken:
            tiering.clock.advance(60_001)
            taken.append(other.hold(tp_of(partition)))

    outcome = tiering.copier(step=lose_the_lease).copy_partition(partition)

    assert isinstance(outcome.error, StaleLeaseError)
    assert taken[0] is not None
    (row,) = tiering.segments(tp_of(partition))
    assert row.state is SegmentState.COPY_SEGMENT_STARTED  # for broker 2's cleanup
    assert tiering.store.pending_uploads(row.segment_id) == []  # the record was refused...
    assert backend.unfinished_puts() == []  # ...so the uploader aborted its upload itself
    assert list(tiering.storage.list_keys()) == []


def _others(log_dir: Path, partition: PartitionDir) -> set[TopicPartition]:
    return {tp_of(p) for p in LogDir(log_dir).partitions()} - {tp_of(partition)}


# -- a corrupt segment --------------------------------------------------------------------------


def test_a_corrupt_segment_is_not_tiered_and_the_other_partitions_carry_on(
    sqlite_fs: Backend,
    tiering_factory: TieringFactory,
    log_dir: Path,
) -> None:
    broken = LogDir(log_dir).partition("clicks", 0)  # v2 batches only
    segment = broken.rolled_segments()[2]
    headers = list(segment.headers())
    batch = headers[len(headers) // 2]
    flipped = batch.position + V2_HEADER_SIZE + (batch.size - V2_HEADER_SIZE) // 2
    data = bytearray(segment.log_path.read_bytes())
    data[flipped] ^= 0x40
    segment.log_path.write_bytes(bytes(data))
    tiering = tiering_factory(sqlite_fs, log_dir)

    outcomes = {o.topic_partition: o for o in tiering.copier().run_once()}

    error = outcomes[tp_of(broken)].error
    assert isinstance(error, CorruptRecordError)
    assert str(segment.log_path) in str(error)
    assert f"position {batch.position}" in str(error)
    tiered = [r.start_offset for r in tiering.finished(tp_of(broken))]
    assert tiered == [s.base_offset for s in broken.rolled_segments()[:2]]
    assert outcomes[TopicPartition("orders", 0)].error is None
    assert_invariants(tiering.store, tiering.storage, [log_dir], untiered={tp_of(broken)})
    labels = {"topic": "clicks", "partition": "0"}
    assert tiering.registry.get_sample_value("rlm_copy_errors_total", labels) == 1

    again = {o.topic_partition: o for o in tiering.copier().run_once()}

    assert isinstance(again[tp_of(broken)].error, CorruptRecordError)
    assert [r.start_offset for r in tiering.finished(tp_of(broken))] == tiered
    assert all(r.state is SegmentState.COPY_SEGMENT_FINISHED for r in tiering.segments(tp_of(broken)))
