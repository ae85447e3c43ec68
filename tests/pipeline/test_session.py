"""The SparkSession's settings, ``--conf`` parsing, and the spark-submit entry point.

The entry point runs in this process (on the session's SparkSession, which a job joins and leaves
running); the README's spark-submit command starts a JVM of its own and is not run here.
"""

from __future__ import annotations

import json

import pytest
from pyspark.sql import SparkSession

from rlm.errors import ConfigError
from rlm.pipeline.spark import submit
from rlm.pipeline.spark.session import (
    DEFAULT_MASTER,
    JVM_LOG_TO_STDERR,
    LOG4J2_PROPERTIES,
    SparkOptions,
    parse_conf,
    session_settings,
)
from tests.pipeline.tiers import Tier


def test_conf_pairs_are_parsed_and_bad_ones_named() -> None:
    assert parse_conf(["spark.executor.memory=4g", "a.b= x=y"]) == (
        ("spark.executor.memory", "4g"),
        ("a.b", " x=y"),
    )
    with pytest.raises(ConfigError, match="--conf 'spark.executor.memory': expected KEY=VALUE"):
        parse_conf(["spark.executor.memory"])
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        parse_conf(["=4g"])


def test_the_master_is_the_options_else_spark_submits_else_local() -> None:
    given = SparkOptions(master="spark://h:7077")
    assert session_settings(given, under_spark_submit=True)[0] == "spark://h:7077"
    assert session_settings(SparkOptions(), under_spark_submit=True)[0] is None
    assert session_settings(SparkOptions(), under_spark_submit=False)[0] == DEFAULT_MASTER == "local[*]"


def test_quiet_logging_and_arrow_unless_conf_says_otherwise() -> None:
    _, conf = session_settings(SparkOptions(), under_spark_submit=False)
    options = f"-Dlog4j.configurationFile={LOG4J2_PROPERTIES} {JVM_LOG_TO_STDERR}"
    assert conf["spark.driver.extraJavaOptions"] == options
    assert LOG4J2_PROPERTIES.is_file()
    _, conf = session_settings(SparkOptions(quiet=False), under_spark_submit=False)
    assert conf["spark.driver.extraJavaOptions"] == JVM_LOG_TO_STDERR
    assert conf["spark.sql.execution.arrow.pyspark.enabled"] == "true"
    _, conf = session_settings(SparkOptions(), under_spark_submit=True)
    assert "spark.driver.extraJavaOptions" not in conf  # spark-submit started the JVM already
    mine = (("spark.driver.extraJavaOptions", "-Dx=1"), ("spark.ui.showConsoleProgress", "true"))
    _, conf = session_settings(SparkOptions(conf=mine), under_spark_submit=False)
    assert conf["spark.driver.extraJavaOptions"] == "-Dx=1" and conf["spark.ui.showConsoleProgress"] == "true"


@pytest.mark.parametrize("healthy_tier", ["sqlite-fs"], indirect=True)
def test_the_submit_entry_point_runs_rlm_spark(
    spark: SparkSession, healthy_tier: Tier, capsys: pytest.CaptureFixture[str]
) -> None:
    code = submit.main(["verify", "--config", str(healthy_tier.config), "--json", "--quiet"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["healthy"] and report["segments"] >= 10
    assert SparkSession.getActiveSession() is spark  # joined, not stopped
