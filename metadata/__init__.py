"""The SQL metadata store: SQLAlchemy models and the adapter implementing rlm's store protocol.

``SqlMetadataStore.open(url)`` connects to PostgreSQL (production) or SQLite (embedded default)
after checking that the schema is migrated; ``metadata.schema.upgrade(url)`` migrates it.
"""

from metadata.engine import DEFAULT_URL, create_engine_for_url
from metadata.schema import check_schema, upgrade
from metadata.store import SqlMetadataStore

__all__ = ["DEFAULT_URL", "SqlMetadataStore", "check_schema", "create_engine_for_url", "upgrade"]
