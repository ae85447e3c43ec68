"""The jobs' driver entry points: open the metadata store and storage, start Spark, run, close.

Each takes rlm's settings and the Spark options, and returns the job's report; ``rlm spark ...``
and spark-submit call them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing, contextmanager
from functools import partial

from pyspark.sql import SparkSession

from rlm.bootstrap import open_compaction_store, open_remote_storage, open_store
from rlm.config import Settings
from rlm.metastore.protocol import MetadataStore
from rlm.pipeline.compact.job import CompactOptions, CompactReport
from rlm.pipeline.export.files import LocalFiles
from rlm.pipeline.export.iceberg import catalog_url, export_iceberg, open_catalog
from rlm.pipeline.export.job import ExportFormat, ExportOptions, ExportReport, export_parquet
from rlm.pipeline.export.parquet import writes_directly
from rlm.pipeline.rebuild.job import RebuildOptions, RebuildReport, rebuild
from rlm.pipeline.spark.export import write_parquet
from rlm.pipeline.spark.files import HadoopFiles
from rlm.pipeline.spark.session import SparkOptions, spark_session
from rlm.pipeline.spark.stage import collect_stage
from rlm.pipeline.storage import StorageSpec
from rlm.pipeline.verify.job import VerifyOptions, VerifyReport, verify
from rlm.storage.protocol import RemoteStorage


def run_verify(
    settings: Settings, spark: SparkOptions, options: VerifyOptions, *, progress: bool | None = None
) -> VerifyReport:
    """``rlm spark verify``: scrub the remote tier that ``settings`` name.

    Raises:
        RlmError: The metadata store or the storage cannot be opened or listed, or a topic asked
            for is unknown.
    """
    store = open_compaction_store(settings)
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


@contextmanager
def _job_context(
    settings: Settings, spark: SparkOptions
) -> Iterator[tuple[MetadataStore, RemoteStorage, SparkSession]]:
    """The metadata store, the driver's storage client and the Spark session of a job; closed after."""
    with (
        closing(open_store(settings)) as store,
        closing(open_remote_storage(settings)) as storage,
        spark_session(spark) as session,
    ):
        yield store, storage, session


def run_export(
    settings: Settings, spark: SparkOptions, options: ExportOptions, *, progress: bool | None = None
) -> ExportReport:
    """``rlm spark export``: the records of the remote tier ``settings`` name, as Parquet files or
    appended to an Iceberg table.

    Raises:
        RlmError: The metadata store or the storage cannot be opened or read, a topic asked for
            is unknown, or the output holds an export already and the run is not incremental.
    """
    with _job_context(settings, spark) as (store, storage, session):
        spec = StorageSpec.from_settings(settings)
        collect = partial(collect_stage, session, progress=progress)
        if options.format is ExportFormat.ICEBERG:
            url = catalog_url(settings.metadata_url, settings.export_iceberg_catalog_url)
            warehouse = settings.export_iceberg_warehouse
            return export_iceberg(
                store,
                storage,
                spec,
                collect,
                partial(write_parquet, session, table_files=True, progress=progress),
                HadoopFiles(session),
                options,
                open_catalog(url, warehouse),
                warehouse,
            )
        write = partial(write_parquet, session, progress=progress)
        # A local output's commit needs no round trip to the JVM per file.
        files = LocalFiles() if writes_directly(options.output) else HadoopFiles(session)
        return export_parquet(store, storage, spec, collect, write, files, options)


def run_rebuild(
    settings: Settings, spark: SparkOptions, options: RebuildOptions, *, progress: bool | None = None
) -> RebuildReport:
    """``rlm spark rebuild-metadata``: the rows of the remote tier ``settings`` name, rebuilt into
    the (empty, migrated) metadata database they name.

    Raises:
        RlmError: The database is not empty or not migrated, or the store failed.
    """
    with _job_context(settings, spark) as (store, storage, session):
        collect = partial(collect_stage, session, progress=progress)
        return rebuild(store, storage, StorageSpec.from_settings(settings), collect, options)
