"""The SparkSession an rlm job runs in.

:func:`spark_session` starts one (and stops it afterwards) unless one is active already, which it
then uses and leaves running (a notebook's, a test session's, or spark-submit's). The master is
``--master`` when given, else spark-submit's, else ``local[*]``. Before the JVM starts,
``PYSPARK_PYTHON`` defaults to this interpreter (executors then import the same rlm and pyarrow)
and ``SPARK_LOCAL_IP`` to ``127.0.0.1`` (a laptop's changing address does not matter to a local
master). Spark logs errors only, unless ``--conf`` says otherwise; Arrow is on.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import SparkSession

from rlm.errors import ConfigError

DEFAULT_MASTER = "local[*]"
#: rlm's Spark logging: errors only (see the file).
LOG4J2_PROPERTIES = Path(__file__).with_name("log4j2.properties")
#: The JVM's own log (class data sharing, GC, ...: warnings at its default level) goes to stderr, not
#: to stdout as it does by default, so that stdout carries only what rlm prints (a ``--json``
#: document stays parseable when the JVM warns of, say, a class archive it cannot use).
JVM_LOG_TO_STDERR = "-Xlog:disable -Xlog:all=warning:stderr"
#: What rlm sets unless ``--conf`` sets it otherwise.
DEFAULT_CONF: dict[str, str] = {
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # rlm prints its own progress line per stage (rlm.pipeline.spark.progress).
    "spark.ui.showConsoleProgress": "false",
}


@dataclass(frozen=True)
class SparkOptions:
    """How to run a job on Spark."""

    master: str | None = None
    """``--master``: any Spark master URL; ``None`` takes spark-submit's, else ``local[*]``."""
    app_name: str = "rlm"
    conf: tuple[tuple[str, str], ...] = ()
    """``--conf key=value`` pairs, applied after rlm's defaults."""
    quiet: bool = True
    """Spark logs errors only (unless ``conf`` sets the driver's Java options)."""


def parse_conf(items: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """``["k=v", ...]`` as pairs.

    Raises:
        ConfigError: An item has no ``=`` or an empty key; the message names it.
    """
    pairs = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--conf {item!r}: expected KEY=VALUE (e.g. spark.executor.memory=4g)")
        pairs.append((key.strip(), value))
    return tuple(pairs)


def _under_spark_submit() -> bool:
    # spark-submit starts the JVM first and tells PySpark where it listens (PySpark's own test).
    return "PYSPARK_GATEWAY_PORT" in os.environ


def session_settings(options: SparkOptions, *, under_spark_submit: bool) -> tuple[str | None, dict[str, str]]:
    """The master to set (``None``: leave spark-submit's) and the settings to give the builder.

    Outside spark-submit rlm starts the JVM, so the driver's Java options send the JVM's own log to
    stderr (:data:`JVM_LOG_TO_STDERR`) and set the quiet logging; under spark-submit the JVM runs
    already and spark-submit's settings stand.
    """
    master = options.master or (None if under_spark_submit else DEFAULT_MASTER)
    conf = dict(DEFAULT_CONF)
    if not under_spark_submit:
        quiet = f"-Dlog4j.configurationFile={LOG4J2_PROPERTIES} " if options.quiet else ""
        conf["spark.driver.extraJavaOptions"] = quiet + JVM_LOG_TO_STDERR
    conf.update(options.conf)
    return master, conf


def build_session(options: SparkOptions) -> SparkSession:
    """Start (or join spark-submit's) session with rlm's settings; the caller stops it."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    master, conf = session_settings(options, under_spark_submit=_under_spark_submit())
    builder = SparkSession.builder.appName(options.app_name)
    if master is not None:
        builder = builder.master(master)
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    if options.quiet:
        session.sparkContext.setLogLevel("ERROR")
    return session


@contextmanager
def spark_session(options: SparkOptions) -> Iterator[SparkSession]:
    """The active session if there is one (left running), else a new one, stopped on exit."""
    active = SparkSession.getActiveSession()
    if active is not None:
        yield active
        return
    session = build_session(options)
    try:
        yield session
    finally:
        session.stop()
