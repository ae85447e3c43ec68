"""``rlm spark export``: the remote tier's records as Parquet files or an Iceberg table.

* :mod:`~rlm.pipeline.export.rows`: the per-segment stage, one row per record (control records
  and, under ``read_committed``, aborted transactions' records left out).
* :mod:`~rlm.pipeline.export.bounds`: where each partition's export starts and stops, from
  ``--from``/``--to`` (rlm's offset-for-timestamp search) and the ``--incremental`` ledger.
* :mod:`~rlm.pipeline.export.files` and :mod:`~rlm.pipeline.export.commit`: staging then commit.
* :mod:`~rlm.pipeline.export.job`: the driver's side of a run.
"""
