"""Objects set aside from Python's cyclic collector (rlm/collector.py), in a fresh interpreter:
freezing objects in the test process would change every later test's collections."""

from __future__ import annotations

import subprocess
import sys

#: A live cycle and a garbage one made before set_aside, a live cycle made after; then how many
#: were set aside, whether the collector still walks each live one, whether the garbage went.
SET_ASIDE = """
import gc, weakref
from rlm.collector import set_aside

class Node:
    pass

def cycle():
    node = Node()
    node.self = node
    return node

gc.disable()  # no collection but set_aside's own
kept = [cycle() for _ in range(10_000)]
garbage = cycle()
gone = weakref.ref(garbage)
del garbage
frozen = set_aside()
later = cycle()
walked = {id(o) for o in gc.get_objects()}
print(frozen >= len(kept), frozen == gc.get_freeze_count())
print(id(kept[0]) in walked, id(later) in walked, gone() is None)
"""


def test_what_is_set_aside_is_no_longer_walked_by_collections_and_garbage_goes_first() -> None:
    done = subprocess.run([sys.executable, "-c", SET_ASIDE], capture_output=True, text=True, check=True)
    frozen_all, counted, old_walked, new_walked, garbage_gone = done.stdout.split()
    assert frozen_all == "True"
    assert counted == "True"
    assert old_walked == "False"  # set aside: in the permanent generation
    assert new_walked == "True"  # made after: collected as ever
    assert garbage_gone == "True"  # collected before the rest was set aside, not kept for good
