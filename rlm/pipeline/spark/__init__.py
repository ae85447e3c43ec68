"""Spark's side of rlm's jobs: the only package that imports pyspark.

* :mod:`~rlm.pipeline.spark.session`: the SparkSession a job runs in (master, ``--conf``, quiet
  logs, the executors' Python).
* :mod:`~rlm.pipeline.spark.stage`: a :class:`~rlm.pipeline.stage.Stage` run over segment
  summaries with ``mapInArrow``, one task per segment.
* :mod:`~rlm.pipeline.spark.progress`: a progress line per stage, from Spark's status tracker.
* :mod:`~rlm.pipeline.spark.jobs`: the jobs' driver entry points, which ``rlm spark ...`` calls.
* :mod:`~rlm.pipeline.spark.submit`: the same jobs through ``spark-submit``.
"""
