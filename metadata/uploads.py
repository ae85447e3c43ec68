"""Pending multipart uploads of segments being copied (``rlm_pending_upload``).

The copier records an upload's id as soon as the store created it; the cleanup of a copy that
never finished aborts the recorded uploads by id. Rows go when their segment finishes either way.
"""

from __future__ import annotations

from uuid import UUID

from sqlalchemy import Connection, delete, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from metadata.models import PendingUploadRow
from rlm.metastore.model import PendingUpload

Upload = PendingUploadRow


def add(conn: Connection, segment_id: UUID, upload: PendingUpload) -> None:
    """Insert the upload's row; a row already there (a retried call) is left as it is."""
    dialect_insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    conn.execute(
        dialect_insert(Upload)
        .values(segment_id=segment_id, upload_id=upload.upload_id, object_key=upload.key)
        .on_conflict_do_nothing(index_elements=["segment_id", "upload_id"])
    )


def of_segment(conn: Connection, segment_id: UUID) -> list[PendingUpload]:
    """The segment's uploads, ordered by key then upload id."""
    rows = conn.execute(
        select(Upload.object_key, Upload.upload_id)
        .where(Upload.segment_id == segment_id)
        .order_by(Upload.object_key, Upload.upload_id)
    )
    return [PendingUpload(row.object_key, row.upload_id) for row in rows]


def forget(conn: Connection, segment_id: UUID) -> None:
    """Delete the segment's rows."""
    conn.execute(delete(Upload).where(Upload.segment_id == segment_id))
