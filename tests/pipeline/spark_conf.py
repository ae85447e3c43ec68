"""The Spark settings of the test JVMs (the session's, and those of jobs run in processes of their own).

The jobs of the suite are small and short: the JVMs compile with the client compiler only and
collect with the serial collector, which costs a JVM that starts and runs a few small jobs about
40% less CPU than the defaults (the server compiler's and G1's threads do not pay off in seconds).
The queries run without adaptive execution and without generated code (:data:`SQL_CONF`): on rows
this few, re-planning at each shuffle and compiling each plan's Java with Janino cost more than they
save (together about a fifth of the CPU of a JVM running the command line's compaction tests).
Both change how Spark runs a plan, not what it computes. The rest is rlm's own (its quiet
logging), and no web UI.

A JVM starting Spark spends most of its first seconds finding, parsing and verifying classes in
Spark's jars: the test JVMs map them from a class data sharing archive instead
(:func:`ensure_class_archive`), which saves about five CPU seconds of each JVM (a killed export's
process: 13 s instead of 18 s). The archive is written once per worktree (``build/test-jvm``, kept
for later runs, about 50 CPU seconds) by a JVM that runs a few small queries; a JVM that finds it
missing or stale (another JDK or Spark) runs without it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

#: The Java options of a test JVM, besides rlm's logging configuration.
JIT_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
#: Spark SQL settings of a test JVM: no adaptive re-planning, expressions interpreted.
SQL_CONF = (
    ("spark.sql.adaptive.enabled", "false"),
    ("spark.sql.codegen.wholeStage", "false"),
    ("spark.sql.codegen.factoryMode", "NO_CODEGEN"),
)


#: Where the class archive of the test JVMs is kept (git ignores ``build/``).
ARCHIVE_DIR = Path(__file__).resolve().parents[2] / "build" / "test-jvm"


def class_archive() -> Path:
    """The class archive's path for this Spark, this JDK and :data:`JIT_OPTIONS` (it may not exist)."""
    import pyspark

    home = os.environ.get("JAVA_HOME")
    java = Path(home, "bin", "java") if home else Path(shutil.which("java") or "java")
    java = java.resolve()
    stamp = java.stat().st_mtime_ns if java.exists() else 0
    key = hashlib.sha256(f"{java} {stamp} {JIT_OPTIONS}".encode()).hexdigest()[:12]
    return ARCHIVE_DIR / f"spark-{pyspark.__version__}-{key}.jsa"


def java_options(*, archive_at_exit: Path | None = None) -> str:
    """``spark.driver.extraJavaOptions`` for a test JVM: rlm's quiet logging, :data:`JIT_OPTIONS`,
    and the class archive if there is one (or, with ``archive_at_exit``, the archive to write)."""
    from rlm.pipeline.spark.session import LOG4J2_PROPERTIES  # pyspark loads only for Spark tests

    options = f"-Dlog4j.configurationFile={LOG4J2_PROPERTIES} {JIT_OPTIONS}"
    if archive_at_exit is not None:
        return f"{options} -XX:ArchiveClassesAtExit={archive_at_exit}"
    archive = class_archive()
    return f"{options} -XX:SharedArchiveFile={archive}" if archive.is_file() else options


def ensure_class_archive() -> Path:
    """Write :func:`class_archive` unless it exists: a JVM (``python -m tests.pipeline.spark_conf``)
    runs a few small queries and dumps the classes it loaded as it exits."""
    archive = class_archive()
    if archive.is_file():
        return archive
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(f"{archive.name}.{os.getpid()}.part")
    root = Path(__file__).resolve().parents[2]
    path = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH")) if p)
    done = subprocess.run(
        [sys.executable, "-m", "tests.pipeline.spark_conf", str(partial)],
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        check=False,
        timeout=600,
    )
    if done.returncode != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        raise RuntimeError(f"the class archive was not written:\n{done.stderr.decode()[-3000:]}")
    partial.rename(archive)
    return archive


def small_job_conf(
    shuffle_partitions: int | None = None, *, archive_at_exit: Path | None = None
) -> tuple[tuple[str, str], ...]:
    """What every test JVM sets: no UI, :func:`java_options`, :data:`SQL_CONF`, and
    ``shuffle_partitions`` unless ``None`` (the job's own choice)."""
    options = java_options(archive_at_exit=archive_at_exit)
    conf = [("spark.ui.enabled", "false"), ("spark.driver.extraJavaOptions", options), *SQL_CONF]
    if shuffle_partitions is not None:
        conf.append(("spark.sql.shuffle.partitions", str(shuffle_partitions)))
    return tuple(conf)


def conf_arguments(conf: tuple[tuple[str, str], ...]) -> list[str]:
    """``conf`` as ``--conf key=value`` arguments of an ``rlm spark`` command."""
    return [arg for key, value in conf for arg in ("--conf", f"{key}={value}")]


def _write_archive(path: Path) -> None:
    """Run a few queries of the kinds rlm's jobs run (Arrow in and out of Python, aggregations,
    joins, windows) in a JVM that writes its classes to ``path`` as it exits; wait for it to exit."""
    from pyspark.sql import Window
    from pyspark.sql import functions as sf

    from rlm.pipeline.spark.session import SparkOptions, build_session

    conf = small_job_conf(1, archive_at_exit=path)
    session = build_session(SparkOptions(master="local[1]", app_name="rlm test class archive", conf=conf))
    frame = session.createDataFrame([(i, i % 3, f"k{i % 7}") for i in range(200)], "a long, b int, k string")
    frame.mapInArrow(lambda batches: batches, frame.schema).groupBy("b").agg(sf.max("a")).collect()
    frame.groupBy("b").applyInArrow(lambda table: table, frame.schema).join(
        sf.broadcast(frame.select("k").distinct()), "k"
    ).withColumn("n", sf.row_number().over(Window.partitionBy("b").orderBy("a"))).persist().count()
    gateway = session.sparkContext._gateway
    session.stop()
    assert gateway is not None
    gateway.proc.stdin.close()  # the JVM exits on its stdin's end, writing the archive
    gateway.proc.wait(timeout=600)


if __name__ == "__main__":
    _write_archive(Path(sys.argv[1]))
