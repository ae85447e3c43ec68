"""``rlm spark rebuild-metadata``: the metadata database rebuilt from the remote tier's objects.

* :mod:`~rlm.pipeline.rebuild.objects`: the object sets under the store's root (driver), and
  what each says of itself (executors): its description, or, for objects copied before
  descriptions existed, what reading them shows.
* :mod:`~rlm.pipeline.rebuild.job`: the driver: choose one set per range, write the rows.
"""
