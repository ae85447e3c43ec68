"""A range stream planned while the broker rolls its log.

The plan lists the broker's segments, then reads its high watermark checkpoint. A roll, appends
and a checkpoint between the two leave a high watermark past the listed segments' end: the stream
sends what the listing holds and says where it ends, never a range its listing lacks the offsets
of (it would end short of the end it announced, as a whole stream ends).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rlm.log.logdir import LogDir
from rlm.lookup.service import LookupService
from rlm.metastore.model import TopicPartition
from rlm.stream.plan import RangeQuery
from tests.integration.test_reads_under_local_retention import last_offsets_sent, written
from tests.lookup_support import TOPIC, Backend, runtime


def test_a_stream_planned_as_the_broker_rolls_ends_where_its_listing_does(
    tmp_path: Path, sqlite_template: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log_dir, later = tmp_path / "logs", tmp_path / "later"
    written(log_dir, 20)  # one segment, offsets 0-19, high watermark 20
    written(later, 40, rolls=(20,))  # the same log after a roll at 20 and 20 more records
    rt = runtime(Backend("sqlite-fs", sqlite_template=sqlite_template), tmp_path, log_dir)
    real = LookupService.usable_view
    rolled: list[bool] = []

    def usable_view(self: LookupService, tp: TopicPartition, local: object) -> object:
        # The broker rolls, appends and checkpoints its high watermark once the plan has listed.
        if not rolled:
            source = LogDir(later).partition(TOPIC, 0)
            for path in source.path.iterdir():
                if path.name.startswith(f"{20:020d}."):
                    shutil.copyfile(path, log_dir / source.path.name / path.name)
            for path in later.iterdir():
                if path.is_file():
                    shutil.copyfile(path, log_dir / path.name)
            rolled.append(True)
        return real(self, tp, local)  # type: ignore[arg-type]

    monkeypatch.setattr(LookupService, "usable_view", usable_view)
    try:
        plan = rt.streams.plan(RangeQuery(TopicPartition(TOPIC, 0), offset=0))
        assert rolled, "the broker did not roll under the plan: the test tested nothing"
        sent = last_offsets_sent(rt, plan)
        # Every offset the plan says the stream holds is sent: none missing before its end.
        assert sent == list(range(plan.start, plan.end))
        assert plan.end in (20, 40)
    finally:
        rt.close()
