"""An executor's Python worker before a task (:func:`rlm.pipeline.spark.stage.prepare_worker`): its
storage client opened once, and what it holds frozen again whenever it has imported modules since
the last time (the first task of another kind imports PySpark's serializers for it)."""

from __future__ import annotations

import gc
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlm.pipeline.spark.stage import prepare_worker
from rlm.pipeline.storage import StorageSpec, executor_storage


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """Leave the test process as the test found it: nothing frozen, no module added."""
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.startswith("rlm_test_"):
            del sys.modules[name]
    gc.unfreeze()


@pytest.mark.usefixtures("unfrozen")
def test_objects_are_frozen_again_only_after_new_imports(tmp_path: Path) -> None:
    spec = StorageSpec(tmp_path.as_uri())
    sys.modules["rlm_test_worker"] = types.ModuleType("rlm_test_worker")  # the worker's first imports
    prepare_worker(spec)
    frozen = gc.get_freeze_count()
    assert frozen > 0
    assert executor_storage(spec) is executor_storage(spec)  # opened once, kept

    made = [[i] for i in range(1000)]  # what a task makes (no module imported), tracked by gc
    prepare_worker(spec)
    assert not frozen_now(made)  # nothing frozen again

    sys.modules["rlm_test_serializers"] = types.ModuleType("rlm_test_serializers")  # a new kind's imports
    prepare_worker(spec)
    assert frozen_now(made)


def frozen_now(thing: object) -> bool:
    """Whether ``thing`` is in the permanent generation (``gc.get_objects`` lists the others only).

    Counts would not tell: the freeze count falls whenever a frozen object dies, which other
    threads of a test process may cause at any time."""
    assert gc.is_tracked(thing)
    return not any(o is thing for o in gc.get_objects())
