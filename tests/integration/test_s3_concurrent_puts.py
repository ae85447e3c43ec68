"""Two puts of one key at once, on moto's server over HTTP: the check after a put
(:mod:`rlm.storage.s3_verify`) must not take the other put's object for its own bytes damaged, and
delete it. Keys rewritten in place (the remote log start marker, whose write no lease fences) have
more than one writer."""

from __future__ import annotations

from typing import Any

import pytest

from rlm.errors import ChecksumMismatchError
from rlm.storage.s3 import S3Storage
from tests.s3_support import MotoS3

KEY = "ab/t-0-AAAAAAAAAAAAAAAAAAAAAA/remote-log-start"
MINE = b'{"v":1,"log_start_offset":100}'
THEIRS = b'{"v":1,"log_start_offset":200}'


def _store_whose_put_is_followed_by(moto_s3: MotoS3, bucket: str, other: S3Storage) -> S3Storage:
    """A store whose next PutObject, once answered, is followed at once by ``other``'s put of
    :data:`THEIRS` (before the store checks what it stored)."""
    session = moto_s3.session()
    pending = [True]

    def then_theirs(**_: Any) -> None:
        if pending:
            pending.clear()
            other.put_object(KEY, THEIRS)

    session.events.register("after-call.s3.PutObject", then_theirs)
    return moto_s3.storage(bucket, "tier", session=session)


def test_a_put_replaced_before_its_check_leaves_the_other_puts_object(moto_s3: MotoS3) -> None:
    bucket = moto_s3.new_bucket()
    other = moto_s3.storage(bucket, "tier")
    store = _store_whose_put_is_followed_by(moto_s3, bucket, other)
    try:
        with pytest.raises(ChecksumMismatchError, match="another put"):
            store.put_object(KEY, MINE)
        # The last put's object is kept: the other writer checked it and counts on it.
        assert other.read_range(KEY, 0, 100) == THEIRS
    finally:
        store.close()
        other.close()
