"""Reading a partition's remote tier as a whole: which copies a reader reads (:mod:`.read_plan`)
and where a ``read_committed`` reader of the tier alone stops (:mod:`.stable`).

Both the request path (:mod:`rlm.lookup`) and the pipeline jobs (:mod:`rlm.pipeline`) use them; they
depend on neither.
"""
