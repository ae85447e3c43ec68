"""The Spark settings of the test JVMs (the session's, and those of jobs run in processes of their own).

The jobs of the suite are small and short: the JVMs compile with the client compiler only and
collect with the serial collector, which costs a JVM that starts and runs a few small jobs about
40% less CPU than the defaults (the server compiler's and G1's threads do not pay off in seconds).
The rest is rlm's own (its quiet logging), and no web UI.
"""

from __future__ import annotations

#: The Java options of a test JVM, besides rlm's logging configuration.
JIT_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def java_options() -> str:
    """``spark.driver.extraJavaOptions`` for a test JVM: rlm's quiet logging and :data:`JIT_OPTIONS`."""
    from rlm.pipeline.spark.session import LOG4J2_PROPERTIES  # pyspark loads only for Spark tests

    return f"-Dlog4j.configurationFile={LOG4J2_PROPERTIES} {JIT_OPTIONS}"


def small_job_conf(shuffle_partitions: int | None = None) -> tuple[tuple[str, str], ...]:
    """What every test JVM sets: no UI, :func:`java_options`, and ``shuffle_partitions`` unless
    ``None`` (the job's own choice)."""
    conf = [("spark.ui.enabled", "false"), ("spark.driver.extraJavaOptions", java_options())]
    if shuffle_partitions is not None:
        conf.append(("spark.sql.shuffle.partitions", str(shuffle_partitions)))
    return tuple(conf)


def conf_arguments(conf: tuple[tuple[str, str], ...]) -> list[str]:
    """``conf`` as ``--conf key=value`` arguments of an ``rlm spark`` command."""
    return [arg for key, value in conf for arg in ("--conf", f"{key}={value}")]
