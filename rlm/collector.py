"""Python's cyclic garbage collector in a long-running process: what start-up made is set aside.

A full collection (of the oldest generation) walks every container object the process holds.
Once ``rlm serve`` has started that is some 200,000 objects, none of them garbage: the service's
modules, botocore's S3 model and endpoint rules, FastAPI's routes. Each full collection took
100-140 ms (measured with ``gc.callbacks`` during range streams): a pause of the event loop, which
holds the GIL through it, so that no piece of a stream is sent and no lookup answered.

:func:`set_aside` collects once, then moves every object left to the collector's permanent
generation (:func:`gc.freeze`): later collections walk only what was made since (full ones took
15 ms in the same streams). ``rlm serve`` calls it once its servers are built. What is loaded
later is left to the collector: pyarrow, imported by the first Arrow stream, adds some 15,000
objects.
"""

from __future__ import annotations

import gc


def set_aside() -> int:
    """Collect the garbage there is now, then exempt every object left from later collections.

    Returns:
        The objects the collector now leaves alone (all those set aside so far).
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
