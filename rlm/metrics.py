"""Every Prometheus metric rlm exports, defined in one place.

The registry is passed in (tests build a fresh ``CollectorRegistry``). Labels are topic and
partition at most: never a segment id or an offset.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class Metrics:
    """The metric objects, registered in ``registry``."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        tp = ("topic", "partition")
        # copier
        self.copied_segments = Counter(
            "rlm_copy_segments_total", "Segments copied to the remote tier", tp, registry=r
        )
        self.copied_bytes = Counter("rlm_copy_bytes_total", "Bytes of .log copied", tp, registry=r)
        self.copy_errors = Counter(
            "rlm_copy_errors_total",
            "Segment copies that failed (rolled back, or refused: a segment that fails its checks)", tp,
            registry=r,
        )  # fmt: skip
        self.copy_blocked = Gauge(
            "rlm_copy_blocked",
            "1 while the partition's copying is stopped at a segment it cannot copy (repair or skip it)", tp,
            registry=r,
        )  # fmt: skip
        self.copy_gaps = Counter(
            "rlm_copy_gaps_total",
            "Ranges the broker deleted before they were tiered, recorded as skipped", tp, registry=r,
        )  # fmt: skip
        self.copy_lag_bytes = Gauge(
            "rlm_copy_lag_bytes", "Bytes of rolled segments below the high watermark not yet tiered", tp,
            registry=r,
        )  # fmt: skip
        self.copy_lag_segments = Gauge(
            "rlm_copy_lag_segments", "Rolled segments below the high watermark not yet tiered", tp,
            registry=r,
        )  # fmt: skip
        self.copy_seconds = Histogram(
            "rlm_copy_segment_seconds", "Time to copy one segment", registry=r,
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
        )  # fmt: skip
        self.cleaned_segments = Counter(
            "rlm_cleanup_segments_total", "Unfinished copies removed by the cleanup pass", tp, registry=r
        )
        # retention
        self.deleted_segments = Counter(
            "rlm_retention_deleted_segments_total", "Remote segments deleted by retention", tp, registry=r
        )
        self.deleted_bytes = Counter(
            "rlm_retention_deleted_bytes_total", "Bytes of remote segments deleted by retention", tp,
            registry=r,
        )  # fmt: skip
        self.purged_segments = Counter(
            "rlm_metadata_purged_segments_total",
            "Rows of segments deleted longer ago than remote.log.metadata.deleted.segments.retention.ms "
            "removed from the metadata store", tp, registry=r,
        )  # fmt: skip
        self.remote_log_size_bytes = Gauge(
            "rlm_remote_log_size_bytes", "Size of the partition's finished remote segments", tp, registry=r
        )
        self.loop_errors = Counter(
            "rlm_loop_errors_total", "Errors that ended a pass of a background loop", ("loop",), registry=r
        )
        # bounded task pools (KIP-1075): "offset-reader" and "remote-fetch"
        pool = ("pool",)
        self.pool_task_queue_size = Gauge(
            "rlm_pool_task_queue_size", "Tasks waiting in the pool's queue", pool, registry=r
        )
        self.pool_avg_idle_percent = Gauge(
            "rlm_pool_avg_idle_percent", "Share of the pool's thread-time spent idle over the last 30 s",
            pool, registry=r,
        )  # fmt: skip
        self.pool_tasks_rejected = Counter(
            "rlm_pool_tasks_rejected_total", "Tasks refused because the pool's queue was full", pool,
            registry=r,
        )  # fmt: skip
        self.pool_task_seconds = Histogram(
            "rlm_pool_task_seconds", "Time from submitting a task to the end of its run, queueing included",
            pool, registry=r,
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
        )  # fmt: skip
        self.list_offsets_expirations = Counter(
            "rlm_remote_list_offsets_expirations_total",
            "Partitions of remote ListOffsets requests that answered REQUEST_TIMED_OUT", tp, registry=r,
        )  # fmt: skip
        # remote index cache
        self.index_cache_hits = Counter(
            "rlm_index_cache_hits_total", "Index reads served from the local cache", registry=r
        )
        self.index_cache_misses = Counter(
            "rlm_index_cache_misses_total", "Index reads not in the local cache (loaded or waited for)",
            registry=r,
        )  # fmt: skip
        self.index_cache_evictions = Counter(
            "rlm_index_cache_evictions_total", "Entries evicted to keep the cache within its size", registry=r
        )
        self.index_cache_corrupt_entries = Counter(
            "rlm_index_cache_corrupt_entries_total", "Cached entries found corrupt or missing and refetched",
            registry=r,
        )  # fmt: skip
        self.index_cache_remote_gets = Counter(
            "rlm_index_cache_remote_gets_total", "Ranged GETs the index cache issued", registry=r
        )
        self.index_cache_remote_bytes = Counter(
            "rlm_index_cache_remote_bytes_total", "Bytes the index cache fetched from remote storage",
            registry=r,
        )  # fmt: skip
        self.index_cache_load_errors = Counter(
            "rlm_index_cache_load_errors_total", "Index loads that failed to fetch from remote storage",
            registry=r,
        )  # fmt: skip
        self.index_cache_size_bytes = Gauge(
            "rlm_index_cache_size_bytes", "Bytes of entries in the on-disk index cache", registry=r
        )
        self.index_cache_entries = Gauge(
            "rlm_index_cache_entries", "Entries in the on-disk index cache", registry=r
        )
