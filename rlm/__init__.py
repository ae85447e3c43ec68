"""rlm: a tiered-storage remote log manager for Apache Kafka."""

__version__ = "0.1.0"
