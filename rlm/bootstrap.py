"""The composition root: the one place that builds concrete adapters from settings and wires them.

Everything else receives its collaborators; nothing is built at import time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry

from rlm.config import EMBEDDED_REMOTE_DIR, Settings
from rlm.copier import Copier
from rlm.dynamic_config import DynamicConfig
from rlm.errors import ConfigError, RlmError
from rlm.leases import LeaseKeeper
from rlm.log import watch
from rlm.log.logdir import LogDir
from rlm.lookup.fetch import RecordFetcher
from rlm.lookup.index_cache import RemoteIndexCache
from rlm.lookup.list_offsets import ListOffsets
from rlm.lookup.pool import BoundedPool, RequestTimeout
from rlm.lookup.service import LookupService
from rlm.metastore.model import TopicPartition
from rlm.metastore.protocol import MetadataStore
from rlm.metrics import Metrics
from rlm.overview import Overview
from rlm.retention import Retention
from rlm.storage.protocol import RemoteStorage


def open_store(settings: Settings) -> MetadataStore:
    """Connect to the metadata store (checks its schema; see ``rlm db upgrade``)."""
    from metadata import SqlMetadataStore

    return SqlMetadataStore.open(settings.metadata_url)


def open_remote_storage(settings: Settings, **options: Any) -> RemoteStorage:
    """Open the remote tier named by ``remote.url``."""
    from rlm.storage.url import open_storage

    embedded = EMBEDDED_REMOTE_DIR.resolve().as_uri()
    url = settings.remote_url or embedded
    if url == embedded:
        EMBEDDED_REMOTE_DIR.mkdir(parents=True, exist_ok=True)
    elif url.startswith("s3:") and settings.s3_endpoint_url is not None:
        options.setdefault("endpoint_url", settings.s3_endpoint_url)
    return open_storage(url, **options)


@dataclass
class Runtime:
    """The wired application: store, storage, metrics and the background jobs."""

    settings: Settings
    store: MetadataStore
    storage: RemoteStorage
    metrics: Metrics
    leases: LeaseKeeper
    copier: Copier
    retention: Retention
    index_cache: RemoteIndexCache
    offset_pool: BoundedPool
    fetch_pool: BoundedPool
    request_timeout: RequestTimeout
    lookup: LookupService
    list_offsets: ListOffsets
    fetcher: RecordFetcher
    overview: Overview
    dynamic_config: DynamicConfig
    closed: bool = field(default=False)

    def readiness_problems(self) -> list[str]:
        """Why this rlm cannot serve (empty when ready): the metadata store or the remote tier."""
        problems = []
        try:
            self.store.get_partition(TopicPartition("__rlm_readiness", 0))
        except RlmError as exc:
            problems.append(f"metadata store: {exc}")
        try:
            self.storage.object_size("rlm-readiness-probe")
        except RlmError as exc:
            problems.append(f"remote storage: {exc}")
        return problems

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
            self.index_cache.close()
            self.storage.close()
            self.store.close()


def build_runtime(
    settings: Settings,
    *,
    registry: CollectorRegistry | None = None,
    store: MetadataStore | None = None,
    storage: RemoteStorage | None = None,
    index_cache_on_demand: bool = False,
) -> Runtime:
    """Build every component from ``settings`` (``store``/``storage`` may be given ready-made).

    ``index_cache_on_demand``: open the remote index cache's directory (and take its lock) only
    when a lookup first needs a remote index, for commands that may never read one (``rlm copy``,
    ``rlm retention``, ``rlm lookup``) and may run beside an ``rlm serve`` using the directory.
    """
    if not settings.log_dirs:
        raise ConfigError("no log directories configured: set log.dirs (RLM_LOG_DIRS)")
    watch.set_enabled(settings.log_dirs_watch)
    store = store if store is not None else open_store(settings)
    try:
        storage = storage if storage is not None else open_remote_storage(settings)
    except BaseException:
        store.close()
        raise
    try:
        metrics = Metrics(registry)
        leases = LeaseKeeper(store, settings.broker_id, settings.remote_log_manager_lease_ttl_ms)
        copier = Copier(settings, store, storage, metrics, leases=leases)
        retention = Retention(settings, store, storage, metrics, leases=leases)
        cache = RemoteIndexCache(
            settings.remote_log_index_cache_dir,
            storage,
            metrics,
            max_bytes=settings.remote_log_index_file_cache_total_size_bytes,
            open_now=not index_cache_on_demand,
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
        timeout = RequestTimeout(settings.remote_list_offsets_request_timeout_ms)
        lookup = LookupService(store, storage, cache, settings.log_dirs)
        copier.on_change = lookup.invalidate
        retention.on_change = lookup.invalidate
        retention.on_deleted = lambda segment: cache.remove(segment.segment_id)
        overview = Overview(store, tuple(LogDir(d) for d in settings.log_dirs))
        dynamic = DynamicConfig(offset_pool, timeout, copier)
    except BaseException:
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
        timeout,
        lookup,
        ListOffsets(lookup, offset_pool, timeout),
        RecordFetcher(lookup, storage, cache),
        overview,
        dynamic,
    )
