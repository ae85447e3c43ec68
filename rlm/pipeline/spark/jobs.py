"""The jobs' driver entry points: open the metadata store and storage, start Spark, run, close.

Each takes rlm's settings and the Spark options, and returns the job's report; ``rlm spark ...``
and spark-submit call them.
"""

from __future__ import annotations

from functools import partial

from rlm.bootstrap import open_compaction_store, open_remote_storage, open_store
from rlm.config import Settings
from rlm.pipeline.compact.job import CompactOptions, CompactReport
from rlm.pipeline.spark.session import SparkOptions, spark_session
from rlm.pipeline.spark.stage import collect_stage
from rlm.pipeline.storage import StorageSpec
from rlm.pipeline.verify.job import VerifyOptions, VerifyReport, verify


def run_verify(
    settings: Settings, spark: SparkOptions, options: VerifyOptions, *, progress: bool | None = None
) -> VerifyReport:
    """``rlm spark verify``: scrub the remote tier that ``settings`` name.

    Raises:
        RlmError: The metadata store or the storage cannot be opened or listed, or a topic asked
            for is unknown.
    """
    store = open_store(settings)
    try:
        storage = open_remote_storage(settings)
        try:
            with spark_session(spark) as session:
                collect = partial(collect_stage, session, progress=progress)
                return verify(store, storage, StorageSpec.from_settings(settings), collect, options)
        finally:
            storage.close()
    finally:
        store.close()


def run_compact(
    settings: Settings, spark: SparkOptions, options: CompactOptions, *, progress: bool | None = None
) -> CompactReport:
    """``rlm spark compact``: compact the remote tier of the compacted topics ``settings`` name.

    Raises:
        ConfigError: A topic asked for is not compacted.
        RlmError: The metadata store or the storage cannot be opened, or a topic asked for is unknown.
    """
    from rlm.pipeline.compact.job import compact, compactable_topics
    from rlm.pipeline.spark.compact import SparkEngine

    compactable_topics(settings, options.topics)  # refused before Spark starts
    store = open_compaction_store(settings)
    try:
        storage = open_remote_storage(settings)
        try:
            with spark_session(spark) as session:
                spec = StorageSpec.from_settings(settings)
                engine = SparkEngine(session, spec, progress=progress)
                return compact(store, storage, spec, engine, settings, options)
        finally:
            storage.close()
    finally:
        store.close()
