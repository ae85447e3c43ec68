"""Batch jobs over the remote tier (``rlm spark ...``): what a job decides and computes, in plain Python.

A job runs in three places. The driver reads the metadata store and decides what to read
(:mod:`rlm.remote_tier.read_plan`: per partition, small picklable summaries of its finished segments).
Executors read the objects those summaries name with rlm's own storage backends, opened from a
picklable spec (:mod:`rlm.pipeline.storage`), stream the ``.log`` object in chunks
(:mod:`rlm.pipeline.reader`), and turn records into Arrow batches (:mod:`rlm.pipeline.columns`) or
check them (:mod:`rlm.pipeline.verify`). Spark (:mod:`rlm.pipeline.spark`, the only package that
imports pyspark) moves summaries to executors and per-segment results back; records never pass
through the driver.

A per-segment piece of work is a :class:`rlm.pipeline.stage.Stage`: a module-level function of
``(storage, summary)`` that yields Arrow record batches of a fixed schema. The same stage runs on
Spark (:func:`rlm.pipeline.spark.stage.map_segments`) or in this process
(:func:`rlm.pipeline.stage.run_in_process`, for tests and small tiers).
"""
