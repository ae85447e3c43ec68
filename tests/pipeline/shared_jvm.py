"""Jobs of child processes run on the test session's JVM.

A job killed at a point of its driver (after its Spark work, or between its stages) is killed in
its Python driver: the JVM's part of the job is over at that point, and what the kill must leave
behind (metadata, objects, files) is the driver's doing. Such a child need not start a JVM of its
own (several seconds of CPU each on a two-core machine): it joins the session's through its Py4J
gateway (the way spark-submit hands its JVM to a Python driver), with a SparkSession of its own on
the shared SparkContext. Kills inside a task (an executor's Python worker held mid-stage) still
get a JVM of their own, so that the kill takes the whole job down at once.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PORT, SECRET = "PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET"


def gateway_env(session: SparkSession) -> dict[str, str]:
    """The environment that lets a child process join ``session``'s JVM (:func:`join`)."""
    gateway = session.sparkContext._gateway
    assert gateway is not None
    parameters = gateway.gateway_parameters
    return {PORT: str(parameters.port), SECRET: str(parameters.auth_token)}


def joins() -> bool:
    """Whether this process was given a JVM to join."""
    return PORT in os.environ


def join() -> SparkSession:
    """Join the JVM :func:`gateway_env` names: a SparkSession of this process (its own SQL
    settings) on that JVM's SparkContext, made the active one, so that rlm's jobs run on it and
    leave it running."""
    from pyspark import SparkContext
    from pyspark.java_gateway import launch_gateway
    from pyspark.sql import SparkSession

    gateway = launch_gateway()  # type: ignore[no-untyped-call]  # joins the environment's port
    jvm = gateway.jvm
    context = jvm.org.apache.spark.SparkContext.getOrCreate()
    spark_context = SparkContext(gateway=gateway, jsc=jvm.org.apache.spark.api.java.JavaSparkContext(context))
    shared = jvm.org.apache.spark.sql.classic.SparkSession.getDefaultSession().get()
    session = SparkSession(spark_context, jsparkSession=shared.newSession())
    assert SparkSession.getActiveSession() is session
    return session
