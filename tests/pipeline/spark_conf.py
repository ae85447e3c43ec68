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
Spark's jars: the test JVMs map them from a class data sharing archive instead, which saves about
five CPU seconds of each JVM. The test session's JVM writes the archive as it exits when there is
none yet (:func:`session_archive`; ``build/test-jvm``, kept for later runs): the first run in a
worktree pays a few seconds for it, later runs start from it. A JVM that finds it missing or stale
(another JDK or Spark) runs without it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
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
    """``spark.driver.extraJavaOptions`` for a test JVM: rlm's quiet logging, the JVM's log on stderr,
    :data:`JIT_OPTIONS`, and the class archive if there is one (or, with ``archive_at_exit``, the
    archive to write)."""
    from rlm.pipeline.spark.session import JVM_LOG_TO_STDERR, LOG4J2_PROPERTIES  # pyspark: Spark tests only

    options = f"-Dlog4j.configurationFile={LOG4J2_PROPERTIES} {JVM_LOG_TO_STDERR} {JIT_OPTIONS}"
    if archive_at_exit is not None:
        return f"{options} -XX:ArchiveClassesAtExit={archive_at_exit}"
    archive = class_archive()
    return f"{options} -XX:SharedArchiveFile={archive}" if archive.is_file() else options


def session_archive() -> tuple[Path, Path | None]:
    """The archive and, when it is missing, the temporary path the session's JVM is to write it to
    as it exits (:func:`finish_archive` gives it its name)."""
    archive = class_archive()
    if archive.is_file():
        return archive, None
    archive.parent.mkdir(parents=True, exist_ok=True)
    return archive, archive.with_name(f"{archive.name}.{os.getpid()}.part")


def finish_archive(process: subprocess.Popen[bytes], partial: Path, archive: Path) -> None:
    """Let the stopped session's JVM ``process`` exit (it exits at its stdin's end), writing
    ``partial``; name it ``archive``. A JVM that wrote nothing leaves no archive (later runs write
    it again)."""
    assert process.stdin is not None
    process.stdin.close()
    process.wait(timeout=300)
    if partial.is_file():
        partial.rename(archive)


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
