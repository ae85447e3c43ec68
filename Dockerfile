# syntax=docker/dockerfile:1
# The rlm image: `docker build -t rlm .` (the service), `docker build --target spark -t rlm-spark .`
# (the same plus PySpark and a Java runtime, for the pipeline jobs).
#
#   build    compiles the wheel (with its C extensions: rlm/log/_scan.c, _decode.c, rlm/stream/_ndjson.c) and installs it with its
#            dependencies, at the versions of requirements.lock, into /opt/rlm/venv
#   runtime  slim Python 3.11, no compiler, the venv copied in, non-root user 10001, `rlm` entrypoint
#   spark    runtime + Java 17 + PySpark
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
# A compiler for the C extension; it stays in this stage.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/rlm/venv
WORKDIR /src
COPY pyproject.toml requirements.lock README.md ./
COPY alembic/ alembic/
COPY api/ api/
COPY metadata/ metadata/
COPY rlm/ rlm/
# The extensions are optional in pyproject.toml (a machine without a compiler still installs rlm);
# here they must be built, and the record decoder must find the base image's libzstd and liblz4
# (codecs 4 and 3, decompressed without the GIL): the check below fails the build if not.
RUN /opt/rlm/venv/bin/pip wheel --no-deps --wheel-dir /wheels . \
    && /opt/rlm/venv/bin/pip install --constraint requirements.lock /wheels/rlm-*.whl \
    && /opt/rlm/venv/bin/python -c "import rlm.log._scan, rlm.stream._ndjson; from rlm.log import _decode; \
assert _decode.set_native(True) == (3, 4), 'libzstd.so.1 or liblz4.so.1 is not in the image'"

FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="rlm" \
      org.opencontainers.image.description="Tiered-storage remote log manager for Apache Kafka" \
      org.opencontainers.image.licenses="Apache-2.0"
# A fixed UID/GID: the chart's securityContext and the volumes' permissions rely on it.
RUN groupadd --system --gid 10001 rlm \
    && useradd --system --uid 10001 --gid rlm --home-dir /var/lib/rlm --shell /usr/sbin/nologin rlm \
    && install -d -o rlm -g rlm -m 0750 /var/lib/rlm
COPY --from=build /opt/rlm/venv /opt/rlm/venv
# Relative default paths (the embedded SQLite file, the index cache) land in the working directory.
# Bytecode is compiled at install time; the root filesystem may be read-only.
ENV PATH=/opt/rlm/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
WORKDIR /var/lib/rlm
USER 10001:10001
EXPOSE 8080 9090
ENTRYPOINT ["rlm"]
CMD ["serve"]

FROM runtime AS spark
USER 0
# Java 17 for Spark's JVM; pandas below 3 and pyarrow for mapInPandas/mapInArrow.
# hadolint ignore=DL3008
RUN apt-get update \
    && mkdir -p /usr/share/man/man1 \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*
RUN /opt/rlm/venv/bin/pip install --no-cache-dir pyspark==4.3.0 pandas==2.3.3 pyarrow==26.0.1
# Debian names the JVM directory by architecture as Docker names TARGETARCH (amd64, arm64).
ARG TARGETARCH=amd64
ENV JAVA_HOME=/usr/lib/jvm/java-17-openjdk-${TARGETARCH} \
    PYSPARK_PYTHON=/opt/rlm/venv/bin/python \
    SPARK_LOCAL_DIRS=/tmp
USER 10001:10001
