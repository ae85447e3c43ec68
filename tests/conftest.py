"""Fixtures shared by the whole suite."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlm.log.model import Codec
from rlm.log.produce import ProduceSpec, ProduceSummary, produce

SAMPLE_SPEC = ProduceSpec(
    topics=2,
    partitions=2,
    records=3000,
    segment_bytes=64 * 1024,
    max_batch_records=40,
    legacy_batches=6,
    codecs=tuple(Codec),
    seed=11,
)


@pytest.fixture(scope="session")
def sample_logdir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ProduceSummary]:
    """A generated log directory (read-only for tests: copy it before changing anything)."""
    out = tmp_path_factory.mktemp("sample") / "logs"
    summary = produce(out, SAMPLE_SPEC)
    return out, summary
