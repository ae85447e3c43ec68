"""The Kafka on-disk log format: record batches, indexes, segments, log directories, a writer.

Pure code: it reads and writes bytes and files, nothing else.
"""
