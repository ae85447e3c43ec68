"""Every Prometheus metric rlm exports, defined in one place.

The registry is passed in (tests build a fresh ``CollectorRegistry``). Labels are topic and
partition at most (or a few fixed values: a loop, a pool, a configured log directory): never a
segment id or an offset.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from rlm.errors import METADATA_ERROR_KINDS


class Metrics:
    """The metric objects, registered in ``registry``.

    Also the remote store's :class:`~rlm.storage.events.StorageEvents`: the composition root hands
    it to the store, whose events it counts; and the API authenticator's tokens-file events
    (``api.auth.TokensFileEvents``), which it exports.
    """

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
        self.topic_id_changes = Counter(
            "rlm_topic_id_changes_total",
            "Times a partition's topic id changed (the topic was deleted and created again under the "
            "same name) and the old topic's remote segments were retired", tp, registry=r,
        )  # fmt: skip
        self.diverged_copies_replaced = Counter(
            "rlm_diverged_copies_replaced",
            "Remote segments retired because the broker's log diverged from them (an unclean leader "
            "election); the log is tiered again from their start", tp, registry=r,
        )  # fmt: skip
        self.copies_diverged = Gauge(
            "rlm_copies_diverged",
            "1 while the remote tier holds records the broker's log diverged from and cannot replace "
            "(the copies hold offsets the local log no longer has)", tp, registry=r,
        )  # fmt: skip
        self.lease_yields = Counter(
            "rlm_lease_yields",
            "Copy leases this sidecar gave up to a broker whose log is ahead of its own (its broker "
            "was down, or a follower behind)", tp, registry=r,
        )  # fmt: skip
        self.log_dir_offline = Gauge(
            "rlm_log_dir_offline",
            "1 while the broker's log directory could not be read at the last pass (missing, an I/O "
            "error, an unreadable meta.properties): its partitions are neither tiered nor expired",
            ("log_dir",), registry=r,
        )  # fmt: skip
        self.copy_lag_bytes = Gauge(
            "rlm_copy_lag_bytes", "Bytes of rolled segments below the high watermark not yet tiered", tp,
            registry=r,
        )  # fmt: skip
        self.copy_lag_segments = Gauge(
            "rlm_copy_lag_segments", "Rolled segments below the high watermark not yet tiered", tp,
            registry=r,
        )  # fmt: skip
        self.copy_lag_seconds = Gauge(
            "rlm_copy_lag_seconds",
            "Age of the oldest rolled segment below the high watermark not yet tiered (since its last "
            "write); 0 when none waits", tp, registry=r,
        )  # fmt: skip
        self.copy_seconds = Histogram(
            "rlm_copy_segment_seconds", "Time to copy one segment", registry=r,
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
        )  # fmt: skip
        self.cleaned_segments = Counter(
            "rlm_cleanup_segments_total",
            "Remote segments the copier's cleanup deleted: unfinished copies, deletions left half done, "
            "and the copies a topic id change or a diverged log retired", tp, registry=r,
        )  # fmt: skip
        # remote storage
        self.storage_optional_call_failures = Counter(
            "rlm_storage_optional_call_failures_total",
            "Optional S3 cleanup calls the store refused and rlm skipped (ListMultipartUploads, "
            "AbortMultipartUpload); the uploads they would have aborted are left to the bucket's "
            "lifecycle rule", ("operation",), registry=r,
        )  # fmt: skip
        self.storage_size_only_verifications = Counter(
            "rlm_storage_size_only_verifications_total",
            "Puts checked by size only because the store reported no CRC-32C for them "
            "(s3.verify.after.put: read-back checks the bytes)", registry=r,
        )  # fmt: skip
        # retention
        self.deleted_segments = Counter(
            "rlm_retention_deleted_segments_total", "Remote segments deleted by retention", tp, registry=r
        )
        self.deleted_bytes = Counter(
            "rlm_retention_deleted_bytes_total", "Bytes of remote segments deleted by retention", tp,
            registry=r,
        )  # fmt: skip
        self.deleted_partitions = Counter(
            "rlm_retention_deleted_partitions_total",
            "Partitions of topics the cluster deleted (RemoveTopicRecord in its metadata log), deleted "
            "from the remote tier", ("topic",), registry=r,
        )  # fmt: skip
        self.purged_segments = Counter(
            "rlm_metadata_purged_segments_total",
            "Rows of segments deleted longer ago than remote.log.metadata.deleted.segments.retention.ms "
            "removed from the metadata store", tp, registry=r,
        )  # fmt: skip
        self.remote_log_size_bytes = Gauge(
            "rlm_remote_log_size_bytes", "Size of the partition's finished remote segments", tp, registry=r
        )
        self.cluster_metadata_snapshot_offset = Gauge(
            "rlm_cluster_metadata_snapshot_end_offset",
            "End offset of the broker's latest metadata snapshot read (removals below it count as "
            "committed); -1 before one is read or without a KRaft metadata log", registry=r,
        )  # fmt: skip
        self.cluster_metadata_snapshot_offset.set(-1)
        self.cluster_metadata_unreadable = Gauge(
            "rlm_cluster_metadata_unreadable",
            "Parts of the broker's metadata log the last read could not read (snapshots, batches, "
            "records); the deleted topics found may be incomplete while above 0", registry=r,
        )  # fmt: skip
        self.unreadable_topic_configs = Counter(
            "rlm_retention_unreadable_topic_config_total",
            "Partitions a pass skipped time and size retention of: their topic's retention.ms or "
            "retention.bytes override in the broker's metadata log could not be read",
            ("topic",),
            registry=r,
        )
        self.loop_errors = Counter(
            "rlm_loop_errors_total", "Errors that ended a pass of a background loop", ("loop",), registry=r
        )
        # metadata store
        self.metadata_errors = Counter(
            "rlm_metadata_errors_total",
            "Metadata store calls that failed for want of an answer, by kind: connect, pool_timeout, "
            "timeout, disconnect, unavailable",
            ("kind",), registry=r,
        )  # fmt: skip
        for kind in METADATA_ERROR_KINDS:
            self.metadata_errors.labels(kind=kind)  # every kind is exported, at 0 until it happens
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
        # answers, by the tier that gave them: "local", "remote", or "none"
        tier = ("tier",)
        latency = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
        self.lookup_seconds = Histogram(
            "rlm_lookup_seconds",
            "Time to answer one partition of an offset-for-timestamp request, reader-pool queueing "
            "included, by tier (none: nothing found, an error or a timeout)", tier, registry=r,
            buckets=latency,
        )  # fmt: skip
        self.fetch_seconds = Histogram(
            "rlm_fetch_seconds",
            "Time to read the record batches of one fetch, by tier (none: an error or nothing to read)",
            tier, registry=r, buckets=latency,
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

        # range streams (rlm.stream)
        self.streams_active = Gauge("rlm_streams_active", "Record streams being sent", registry=r)
        self.streams = Counter(
            "rlm_streams_total", "Record streams ended, by outcome (completed, cancelled, failed)",
            ("outcome",), registry=r,
        )  # fmt: skip
        self.streams_refused = Counter(
            "rlm_streams_refused_total", "Record streams refused: remote.fetch.max.streams were being sent",
            registry=r,
        )  # fmt: skip
        self.stream_reads_in_flight = Gauge(
            "rlm_stream_reads_in_flight", "Reads of record streams not finished (remote GETs and file reads)",
            registry=r,
        )  # fmt: skip
        self.stream_read_bytes = Counter(
            "rlm_stream_read_bytes_total", "Bytes record streams read from either tier", registry=r
        )
        # API tokens (api.auth)
        self.auth_tokens_file_unreadable = Gauge(
            "rlm_auth_tokens_file_unreadable",
            "1 while auth.tokens.file cannot be read, or holds a malformed line or no token, at the last "
            "look: the tokens read before stay in use, so revoking or adding one has no effect", registry=r,
        )  # fmt: skip
        self.auth_tokens_file_read = Gauge(
            "rlm_auth_tokens_file_last_read_timestamp_seconds",
            "When auth.tokens.file was last read whole, its tokens taken into use (Unix time); 0 "
            "without one", registry=r,
        )  # fmt: skip

    # -- rlm.storage.events.StorageEvents --------------------------------------------------------

    def optional_call_failed(self, operation: str) -> None:
        """Count an optional storage call the store refused."""
        self.storage_optional_call_failures.labels(operation).inc()

    def checksum_unreported(self) -> None:
        """Count a put checked by size only."""
        self.storage_size_only_verifications.inc()

    # -- api.auth.TokensFileEvents ---------------------------------------------------------------

    def tokens_file_checked(self, usable: bool, read_at: float) -> None:
        """Export what the last look at the tokens file found."""
        self.auth_tokens_file_unreadable.set(0 if usable else 1)
        self.auth_tokens_file_read.set(read_at)
