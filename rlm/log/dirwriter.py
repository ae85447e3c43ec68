"""Writes a whole broker log directory: partitions through :class:`PartitionAppender`, then the
broker-level files (``meta.properties`` and the offset checkpoints) on close."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from rlm.log.checkpoints import new_topic_id, write_meta_properties, write_offset_checkpoint
from rlm.log.logdir import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
)
from rlm.log.model import TopicPartition
from rlm.log.writer import Clock, PartitionAppender, TopicConfig, system_clock


class LogDirWriter:
    """Creates partitions in a log directory and, on close, writes its checkpoints.

    The result is laid out as a broker leaves it after a clean stop of its log manager: trimmed
    indexes ending with the max-timestamp entry, producer snapshots, leader-epoch checkpoints,
    ``partition.metadata`` with a topic id, and recovery points at the log end offsets (so a broker
    that finds no clean-shutdown marker re-checks only each active segment).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        node_id: int = 0,
        cluster_id: str = "rlm-sample-cluster",
        clock: Clock = system_clock,
        default_config: TopicConfig | None = None,
        topic_configs: Mapping[str, TopicConfig] | None = None,
    ) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.clock = clock
        self.default_config = default_config or TopicConfig()
        self.topic_configs = dict(topic_configs or {})
        self._topic_ids: dict[str, str] = {}
        self._appenders: dict[TopicPartition, PartitionAppender] = {}

    def config_for(self, topic: str) -> TopicConfig:
        """The topic's settings (its override, else the default)."""
        return self.topic_configs.get(topic, self.default_config)

    def partition(self, topic: str, partition: int, *, leader_epoch: int = 0) -> PartitionAppender:
        """The appender of ``topic``-``partition``, created on first use."""
        tp = TopicPartition(topic, partition)
        appender = self._appenders.get(tp)
        if appender is None:
            topic_id = self._topic_ids.setdefault(topic, new_topic_id())
            appender = PartitionAppender(
                self.path / str(tp),
                config=self.config_for(topic),
                clock=self.clock,
                leader_epoch=leader_epoch,
                topic_id=topic_id,
            )
            self._appenders[tp] = appender
        return appender

    def close(self, high_watermarks: Mapping[TopicPartition, int] | None = None) -> None:
        """Close every partition and write the checkpoints; idempotent.

        ``high_watermarks`` overrides the default high watermark (the log end offset) per partition.
        """
        ends: dict[tuple[str, int], int] = {}
        starts: dict[tuple[str, int], int] = {}
        for tp, appender in sorted(self._appenders.items()):
            appender.close()
            ends[(tp.topic, tp.partition)] = appender.next_offset
            starts[(tp.topic, tp.partition)] = 0
        hws = dict(ends)
        for tp, hw in (high_watermarks or {}).items():
            hws[(tp.topic, tp.partition)] = hw
        write_offset_checkpoint(self.path / REPLICATION_OFFSET_CHECKPOINT, hws)
        write_offset_checkpoint(self.path / RECOVERY_POINT_CHECKPOINT, ends)
        write_offset_checkpoint(self.path / LOG_START_OFFSET_CHECKPOINT, starts)
        meta = self.path / "meta.properties"
        if not meta.exists():
            write_meta_properties(
                meta,
                {
                    "version": "1",
                    "node.id": str(self.node_id),
                    "cluster.id": self.cluster_id,
                    "directory.id": new_topic_id(),
                },
            )

    def __enter__(self) -> LogDirWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
