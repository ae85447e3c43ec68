"""``rlm spark verify``: a scrubber for the remote tier.

* :mod:`~rlm.pipeline.verify.segment`: one finished segment, on an executor (objects' sizes; with
  ``deep``, every batch and every index file).
* :mod:`~rlm.pipeline.verify.continuity`: a partition's segments together (gaps, overlaps, the
  remote log start offset), from metadata.
* :mod:`~rlm.pipeline.verify.inventory`: objects no row references, rows stuck in STARTED states.
* :mod:`~rlm.pipeline.verify.job`: the driver's side; :mod:`~rlm.pipeline.verify.report` prints.
"""
