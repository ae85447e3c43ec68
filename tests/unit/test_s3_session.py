"""rlm.storage.s3_client.new_session: sessions of their own that read botocore's data files once."""

from __future__ import annotations

import pytest

from rlm.storage.s3_client import new_session


def test_sessions_share_what_botocore_read_and_nothing_else(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "first-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "first-secret")
    first = new_session()
    first.client("s3", region_name="us-east-1", endpoint_url="http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "second-key")
    second = new_session()
    assert first is not second
    loaders = [s._session.get_component("data_loader") for s in (first, second)]
    assert loaders[0] is not loaders[1]
    # The service model the first client read is the very object the second session is given.
    assert loaders[1].load_service_model("s3", "service-2") is loaders[0].load_service_model(
        "s3", "service-2"
    )
    # Each session still reads the credential chain itself.
    credentials = [s.get_credentials() for s in (first, second)]
    assert [c.access_key if c else None for c in credentials] == ["first-key", "second-key"]
    # boto3 adds its data directory to each session's own loader, once.
    for _ in range(3):
        paths = new_session()._session.get_component("data_loader").search_paths
        assert len(paths) == len(set(paths)) == len(loaders[1].search_paths)
