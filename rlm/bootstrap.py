"""The composition root: the one place that builds concrete adapters from settings and wires them.

Everything else receives its collaborators; nothing is built at import time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry

from rlm.config import EMBEDDED_REMOTE_DIR, Settings
from rlm.dynamic_config import DynamicConfig
from rlm.errors import MetadataUnavailableError
from rlm.log.logdir import LogDir
from rlm.log.watch import DirectoryWatcher, open_watcher
from rlm.lookup.fetch import RecordFetcher
from rlm.lookup.index_cache import RemoteIndexCache
from rlm.lookup.list_offsets import ListOffsets
from rlm.lookup.pool import BoundedPool, RequestTimeout
from rlm.lookup.service import LookupService
from rlm.lookup.views import RemoteViews
from rlm.metastore.availability import StoreAvailability
from rlm.metastore.compaction import CompactionStore
from rlm.metastore.model import TopicPartition
from rlm.metastore.protocol import MetadataStore
from rlm.metrics import Metrics
from rlm.readiness import Outcome, ReadinessProbe
from rlm.storage.events import StorageEvents
from rlm.storage.protocol import RemoteStorage
from rlm.stream.reader import AsyncRangeReader
from rlm.stream.service import RecordStreams
from rlm.tiering.copier import Copier
from rlm.tiering.leases import LeaseKeeper
from rlm.tiering.overview import Overview
from rlm.tiering.retention import Retention

#: What readiness asks the metadata store and the remote storage about (nothing has these names).
READINESS_PARTITION = TopicPartition("__rlm_readiness", 0)
#: A listing of this prefix, not a HEAD of a key: a HEAD answer has no body, so a bucket that does
#: not exist answers it with the bare 404 of an object that does not; a listing answers
#: NoSuchBucket. It needs s3:ListBucket under rlm's prefix, which HEAD of a missing key needs too
#: (without it S3 answers 403), and on the filesystem it looks into one (absent) directory.
READINESS_PREFIX = "rlm-readiness-probe/"


def open_store(settings: Settings, metrics: Metrics | None = None) -> CompactionStore:
    """Connect to the metadata store (checks its schema; see ``rlm db upgrade``), with the
    deadlines of the ``metadata.*`` settings; ``metrics`` counts the calls that get no answer."""
    from metadata import SqlMetadataStore
    from metadata.engine import Deadlines

    deadlines = Deadlines(
        pool_timeout_s=settings.metadata_pool_timeout_ms / 1000,
        connect_timeout_s=settings.metadata_connect_timeout_ms / 1000,
        statement_timeout_s=settings.metadata_statement_timeout_ms / 1000,
    )
    on_error = None
    if metrics is not None:
        errors = metrics.metadata_errors
        on_error = lambda error: errors.labels(kind=error.kind).inc()  # noqa: E731
    return SqlMetadataStore.open(
        settings.metadata_url, pool_size=settings.metadata_pool_size, deadlines=deadlines, on_error=on_error
    )


def upgrade_metadata(url: str, revision: str = "head") -> str:
    """Upgrade the metadata database at ``url`` to ``revision`` (``rlm db upgrade``); returns the
    line that says where it is now."""
    from metadata.engine import create_engine_for_url, display_url
    from metadata.schema import current_revision, upgrade

    upgrade(url, revision)
    engine = create_engine_for_url(url, pooled=False)
    try:
        now = current_revision(engine)
    finally:
        engine.dispose()
    return f"metadata database {display_url(url)} is at revision {now}"


def check_metadata(url: str) -> str:
    """Check that the metadata database at ``url`` has this rlm's schema (``rlm db current``);
    returns the line that says so.

    Raises:
        SchemaMismatchError: it has another revision, or none (or is an SQLite file that does
            not exist); the message says which.
    """
    from metadata.engine import create_engine_for_url, display_url
    from metadata.schema import check_schema, head_revision

    engine = create_engine_for_url(url, pooled=False, create=False)
    try:
        check_schema(engine)
    finally:
        engine.dispose()
    return f"metadata database {display_url(url)} is at revision {head_revision()}: up to date"


def open_compaction_store(settings: Settings) -> CompactionStore:
    """The metadata store, as compaction jobs use it (the SQL store implements their protocol)."""
    from metadata import SqlMetadataStore

    store = open_store(settings)
    assert isinstance(store, SqlMetadataStore)
    return store


def open_remote_storage(
    settings: Settings, *, events: StorageEvents | None = None, **options: Any
) -> RemoteStorage:
    """Open the remote tier named by ``remote.url``; an S3 store takes the ``s3.*`` settings.

    Args:
        settings: ``remote.url`` and the ``s3.*`` settings.
        events: Receives an S3 store's events (the metrics).
        options: S3 options that override the settings (``S3Config`` fields, ``session``...).
    """
    from rlm.storage.url import open_storage

    embedded = EMBEDDED_REMOTE_DIR.resolve().as_uri()
    url = settings.remote_url or embedded
    if url == embedded:
        EMBEDDED_REMOTE_DIR.mkdir(parents=True, exist_ok=True)
    elif url.startswith("s3:"):
        for name, value in s3_options(settings).items():
            options.setdefault(name, value)
        if events is not None:
            options.setdefault("events", events)
    return open_storage(url, **options)


def s3_options(settings: Settings) -> dict[str, Any]:
    """The ``S3Config`` fields the ``s3.*`` settings give."""
    options: dict[str, Any] = {
        "addressing_style": settings.s3_addressing_style,
        "checksums": settings.s3_checksums,
        "content_md5": {"auto": None, "on": True, "off": False}[settings.s3_content_md5],
        "multipart_checksum_type": settings.s3_multipart_checksum_type,
        "verify_after_put": settings.s3_verify_after_put,
    }
    if settings.s3_endpoint_url is not None:
        options["endpoint_url"] = settings.s3_endpoint_url
    if settings.s3_region is not None:
        options["region"] = settings.s3_region
    return options


@dataclass
class Runtime:
    """The wired application: store, storage, metrics and the background jobs."""

    settings: Settings
    store: CompactionStore
    storage: RemoteStorage
    metrics: Metrics
    leases: LeaseKeeper
    copier: Copier
    retention: Retention
    index_cache: RemoteIndexCache
    offset_pool: BoundedPool
    fetch_pool: BoundedPool
    metadata_pool: BoundedPool
    request_timeout: RequestTimeout
    lookup: LookupService
    list_offsets: ListOffsets
    fetcher: RecordFetcher
    overview: Overview
    dynamic_config: DynamicConfig
    readiness: ReadinessProbe
    streams: RecordStreams
    watcher: DirectoryWatcher | None = None
    """Tells the lookups when the broker changed its files (``log.dirs.watch``); None: ``stat``."""
    closed: bool = field(default=False)

    def readiness_problems(self) -> list[str]:
        """Why this rlm cannot serve (empty when ready): the metadata store or the remote tier
        does not answer. Returns within ``readiness.timeout.ms``, whatever they do."""
        return self.readiness.problems()

    async def readiness_problems_async(self) -> list[str]:
        """:meth:`readiness_problems` for an event loop (holds no thread while it waits)."""
        return await self.readiness.problems_async()

    def close(self) -> None:
        """Release leases and connections; idempotent."""
        if self.closed:
            return
        self.closed = True
        try:
            self.leases.release_all()
        finally:
            self.offset_pool.close(wait=False)
            self.fetch_pool.close(wait=False)
            self.metadata_pool.close(wait=False)
            self.streams.close()
            self.index_cache.close()
            if self.watcher is not None:
                self.watcher.close()
            self.storage.close()
            self.store.close()


def build_runtime(
    settings: Settings,
    *,
    registry: CollectorRegistry | None = None,
    store: CompactionStore | None = None,
    storage: RemoteStorage | None = None,
    index_cache_on_demand: bool = False,
) -> Runtime:
    """Build every component from ``settings`` (``store``/``storage`` may be given ready-made).

    Without log directories (``log.dirs`` empty) the runtime is a query tier: lookups and fetches
    answer from the remote tier alone, and the copier and retention find no partition to work on.

    ``index_cache_on_demand``: keep the remote index cache in a temporary directory of its own,
    created only when a lookup first needs a remote index, never in the shared one: for commands
    that run beside an ``rlm serve`` using it (``rlm copy``, ``rlm retention``, ``rlm lookup``),
    which must never keep the server from starting.
    """
    metrics = Metrics(registry)
    store = store if store is not None else open_store(settings, metrics)
    try:
        storage = storage if storage is not None else open_remote_storage(settings, events=metrics)
    except BaseException:
        store.close()
        raise
    watcher = None
    try:
        leases = LeaseKeeper(
            store, settings.broker_id, settings.remote_log_manager_lease_ttl_ms, metrics=metrics
        )
        copier = Copier(settings, store, storage, metrics, leases=leases)
        retention = Retention(settings, store, storage, metrics, leases=leases)
        cache = RemoteIndexCache(
            settings.remote_log_index_cache_dir,
            storage,
            metrics,
            max_bytes=settings.remote_log_index_file_cache_total_size_bytes,
            open_now=not index_cache_on_demand,
            private=index_cache_on_demand,
        )
        offset_pool = BoundedPool(
            "offset-reader",
            settings.remote_log_offset_reader_threads,
            settings.remote_log_offset_read_max_pending_tasks,
            metrics,
        )
        fetch_pool = BoundedPool(
            "remote-fetch",
            settings.remote_log_reader_threads,
            settings.remote_log_reader_max_pending_tasks,
            metrics,
        )
        # Lookups read partitions' remote-tier views here, in batches: never on the reader pool,
        # so that local answers never wait behind remote reads (KIP-1075), and never on a request's
        # own thread, so that a request waits for the store no longer than its deadline. More
        # threads than pooled connections would only wait for one.
        metadata_pool = BoundedPool(
            "metadata-reader",
            settings.metadata_pool_size,
            settings.remote_log_offset_read_max_pending_tasks,
            metrics,
        )
        timeout = RequestTimeout(settings.remote_list_offsets_request_timeout_ms)
        availability = StoreAvailability(settings.metadata_retry_backoff_ms / 1000)
        watcher = open_watcher(settings.log_dirs_watch)
        # The partitions' remote-tier summaries, reused across lookups (rlm.lookup.views).
        views = RemoteViews(store, availability)
        lookup = LookupService(
            store,
            storage,
            cache,
            settings.log_dirs,
            availability=availability,
            views=views,
            watcher=watcher,
        )
        copier.on_change = lookup.invalidate
        retention.on_change = lookup.invalidate
        retention.on_deleted = lambda segment: cache.remove(segment.segment_id)
        copier.on_deleted = retention.on_deleted
        overview = Overview(store, tuple(LogDir(d, watcher=watcher) for d in settings.log_dirs))
        dynamic = DynamicConfig(offset_pool, timeout, copier)
        readiness = _readiness_probe(store, storage, availability, settings.readiness_timeout_ms / 1000)
        streams = _record_streams(settings, lookup, cache, storage, metrics)
    except BaseException:
        if watcher is not None:
            watcher.close()
        storage.close()
        store.close()
        raise
    return Runtime(
        settings,
        store,
        storage,
        metrics,
        leases,
        copier,
        retention,
        cache,
        offset_pool,
        fetch_pool,
        metadata_pool,
        timeout,
        lookup,
        ListOffsets(
            lookup,
            offset_pool,
            timeout,
            metadata_pool=metadata_pool,
            max_partitions=settings.list_offsets_max_partitions,
            metrics=metrics,
        ),
        RecordFetcher(lookup, storage, cache, metrics),
        overview,
        dynamic,
        readiness,
        streams,
        watcher,
    )


def _record_streams(
    settings: Settings,
    lookup: LookupService,
    cache: RemoteIndexCache,
    storage: RemoteStorage,
    metrics: Metrics,
) -> RecordStreams:
    """Range streams read an S3 store with aiobotocore on the event loop, any other on threads."""
    from rlm.storage.async_s3 import AsyncS3Reader
    from rlm.storage.async_threaded import ThreadedRangeReader
    from rlm.storage.s3 import S3Storage

    remote: AsyncRangeReader
    if isinstance(storage, S3Storage):
        # A stream holds up to two GETs open: its segment's and the next one's, read ahead.
        remote = AsyncS3Reader.for_storage(storage, connections=2 * settings.remote_fetch_max_streams)
    else:
        remote = ThreadedRangeReader(storage)
    return RecordStreams(
        lookup,
        cache,
        remote,
        metrics,
        buffer_bytes=settings.remote_fetch_stream_buffer_bytes,
        max_streams=settings.remote_fetch_max_streams,
    )


def _readiness_probe(
    store: MetadataStore, storage: RemoteStorage, availability: StoreAvailability, timeout_s: float
) -> ReadinessProbe:
    """Readiness asks each dependency something cheap; what it learns of the metadata store also
    tells the lookups whether to ask the store (:class:`StoreAvailability`)."""
    metadata = "metadata store"

    def noted(outcome: Outcome) -> None:
        if outcome.name != metadata:
            return
        if outcome.error is None and outcome.answered:
            availability.succeeded()
        elif isinstance(outcome.error, MetadataUnavailableError):
            availability.failed(outcome.error)
        elif not outcome.answered:
            availability.failed(
                MetadataUnavailableError(
                    f"no answer to the readiness probe within {timeout_s * 1000:.0f} ms", kind="timeout"
                )
            )

    checks = {
        metadata: lambda: store.get_partition(READINESS_PARTITION),
        "remote storage": lambda: next(iter(storage.list_keys(READINESS_PREFIX)), None),
    }
    return ReadinessProbe(checks, timeout_s, on_outcome=noted)
