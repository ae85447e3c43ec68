"""``rlm serve`` without log directories: a query tier over the remote tier another rlm filled.

The sidecar of :func:`tests.e2e.conftest.in_process` tiered ``orders-0`` and the broker's local
retention deleted its older half. A real ``rlm serve`` subprocess with no ``log.dirs``, on the same
metadata database and remote store, must be ready, run neither copier nor retention, and answer
from the remote tier exactly what the sidecar answers there; what only the broker holds (records
never tiered, the high watermark, its local log) it answers as absent, never wrongly.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from rlm.cli import main
from rlm.metastore.model import TopicPartition
from tests.e2e.conftest import READ_TOKEN, InProcess, ServeProcess, bearer, start_serve
from tests.lookup_support import NOW, TOPIC

pytestmark = pytest.mark.slow

TP = TopicPartition(TOPIC, 0)
OFFSETS = f"/v1/topics/{TOPIC}/partitions/0/offsets"
RECORDS = f"/v1/topics/{TOPIC}/partitions/0/records"


@pytest.fixture(scope="module")
def query_tier(tmp_path_factory: pytest.TempPathFactory, in_process: InProcess) -> Iterator[ServeProcess]:
    root = tmp_path_factory.mktemp("query-tier")
    settings = in_process.settings
    served = start_serve(
        root,
        {
            "metadata.url": settings.metadata_url,
            "remote.url": settings.remote_url,
            "remote.log.index.cache.dir": str(root / "index-cache"),
            "auth.tokens.file": str(in_process.tokens_file),
        },
        name="query-tier",
    )
    try:
        yield served
    finally:
        served.terminate()


def _ask(client: httpx.Client, timestamp: int | str) -> dict[str, Any]:
    response = client.get(OFFSETS, params={"timestamp": str(timestamp)})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_it_is_ready_and_runs_no_background_job(query_tier: ServeProcess) -> None:
    with query_tier.client() as client:
        assert client.get("/readyz").json()["status"] == "ready"
    assert "a query tier over the remote tier" in query_tier.log_text()


def test_timestamps_answer_from_the_remote_tier_as_the_sidecar_does(
    query_tier: ServeProcess, in_process: InProcess
) -> None:
    highest_copied = in_process.runtime.store.highest_copied_offset(TP)
    remote_answers = absent = 0
    with query_tier.client(headers=bearer(READ_TOKEN)) as client:
        for timestamp in range(NOW - 100, NOW + 4_800, 37):
            sidecar = in_process.runtime.list_offsets.find_one(TP, timestamp)
            got = _ask(client, timestamp)
            expected: tuple[int, int, int, str | None]
            if 0 <= sidecar.offset <= highest_copied:
                # The sidecar may read a tiered range locally; the query tier reads it remotely.
                expected = (sidecar.offset, sidecar.timestamp, sidecar.leader_epoch, "remote")
                remote_answers += 1
            else:  # only the broker has the answer (or there is none): the query tier has none
                expected = (-1, -1, -1, None)
                absent += 1
            assert (got["offset"], got["timestamp"], got["leader_epoch"], got["tier"]) == expected, timestamp
    assert remote_answers > 10 and absent > 0, "the timestamps must span both cases"


def test_special_timestamps(query_tier: ServeProcess, in_process: InProcess) -> None:
    runtime = in_process.runtime
    with query_tier.client(headers=bearer(READ_TOKEN)) as client:
        earliest = runtime.list_offsets.find_one(TP, -2)
        assert _ask(client, "earliest")["offset"] == earliest.offset
        assert _ask(client, "latest-tiered")["offset"] == runtime.store.highest_copied_offset(TP)
        # The high watermark and the local log are the broker's: the query tier knows neither.
        for special in ("latest", "earliest-local"):
            got = _ask(client, special)
            assert (got["offset"], got["tier"]) == (-1, None), special
        unknown = client.get(f"/v1/topics/{TOPIC}/partitions/9/offsets", params={"timestamp": "0"})
        assert unknown.status_code == 404


def test_records_are_fetched_from_the_remote_tier(query_tier: ServeProcess, in_process: InProcess) -> None:
    earliest = in_process.runtime.list_offsets.find_one(TP, -2).offset
    expected = in_process.runtime.fetcher.fetch(TP, earliest, 1_000_000)
    with query_tier.client(headers=bearer(READ_TOKEN)) as client:
        response = client.get(RECORDS, params={"offset": earliest})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["tier"] == "remote"
    got = [(r["offset"], r["timestamp"]) for r in body["records"]]
    assert got and got == [(r.offset, r.timestamp) for r in expected.records][: len(got)]


def test_metrics_count_the_answers_by_tier(query_tier: ServeProcess) -> None:
    with query_tier.client(headers=bearer(READ_TOKEN)) as client:
        _ask(client, 0)
        assert client.get(RECORDS, params={"offset": _ask(client, "earliest")["offset"]}).status_code == 200
        text = client.get("/metrics").text
    counts = {
        (sample.name, sample.labels.get("tier")): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name in ("rlm_lookup_seconds_count", "rlm_fetch_seconds_count")
    }
    assert counts[("rlm_lookup_seconds_count", "remote")] >= 1
    assert counts[("rlm_fetch_seconds_count", "remote")] >= 1
    assert ("rlm_lookup_seconds_count", "local") not in counts
    assert "rlm_copy_lag_segments{" not in text  # no copier: no partition has a copy lag


@pytest.mark.parametrize("command", ["copy", "retention"])
def test_the_broker_jobs_refuse_to_run_without_log_dirs(
    command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in [k for k in os.environ if k.startswith("RLM_")]:
        monkeypatch.delenv(name)
    assert main([command, "--once"]) == 1
    assert f"rlm {command} works on the broker's log directories: set log.dirs" in capsys.readouterr().err
