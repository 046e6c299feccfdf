# The lccn-subscriber image (compose.yaml builds it). Multi-stage: the wheels, a virtual
# environment installed from them alone, and the runtime with that environment only.
#
#   docker build -t lccn-subscriber .                  (python:3.11-slim; wheels built here)
#   podman build --format docker --build-arg BASE=localhost/debian-python:bookworm \
#       --build-arg WHEELS=context -t lccn-subscriber CONTEXT
#                                  (CONTEXT/wheels/: this checkout's wheel and its
#                                   dependencies' wheels, the otel extra's included,
#                                   for a build without network)
#
# BASE: any Debian-like image with python3 (>= 3.11) and its venv module; the build and
# runtime stages share it (the environment's interpreter is the base's).
ARG BASE=python:3.11-slim
# WHEELS: source (build them from this directory's source, from PyPI) or context (take
# the build context's wheels/).
ARG WHEELS=source
# EXTRAS: the package's extras to install ("otel": OpenTelemetry, so that tracing is a
# setting, not a rebuild; empty: none).
ARG EXTRAS=otel

FROM ${BASE} AS wheels-source
ARG EXTRAS
COPY pyproject.toml README.md LICENSE /src/
COPY subscriber /src/subscriber
COPY handlers /src/handlers
COPY schemas /src/schemas
RUN python3 -m venv /tmp/pip \
    && /tmp/pip/bin/pip wheel --no-cache-dir --disable-pip-version-check \
        --wheel-dir /wheels "/src[${EXTRAS}]"

FROM scratch AS wheels-context
COPY wheels/ /wheels/

# One instruction of its own: a stage that only renames another trips podman 4.3's
# --layers=false clean-up ("identifier is not an image").
FROM wheels-${WHEELS} AS wheels
LABEL org.opencontainers.image.title=lccn-subscriber-wheels

FROM ${BASE} AS build
ARG EXTRAS
COPY --from=wheels /wheels /wheels
# From the wheels alone (no index): what is installed is what was built. pip itself is
# not needed at run time.
RUN python3 -m venv /opt/lccn \
    && /opt/lccn/bin/pip install --no-cache-dir --disable-pip-version-check --no-index \
        --find-links /wheels "lccn-subscriber[${EXTRAS}]" \
    && /opt/lccn/bin/pip uninstall --yes --quiet --disable-pip-version-check setuptools pip \
    && /opt/lccn/bin/lccn-subscriber --help >/dev/null

FROM ${BASE}
# A user of its own (no login, no shell), and the state directory it owns: the embedded
# store's default home (LCCN_HOME); mount a volume there to keep it.
RUN useradd --uid 10001 --user-group --home-dir /var/lib/lccn --create-home \
        --shell /usr/sbin/nologin lccn
COPY --from=build /opt/lccn /opt/lccn
ENV PATH=/opt/lccn/bin:$PATH \
    LCCN_HOME=/var/lib/lccn \
    LCCN_HTTP__HOST=0.0.0.0 \
    PYTHONUNBUFFERED=1
USER lccn
WORKDIR /var/lib/lccn
# 8765: the callback (and /healthz); /readyz and /metrics on 127.0.0.1:9765 unless
# http.metrics_host says where (see docs/guide/deploy.md).
EXPOSE 8765
# Liveness only (/healthz): a slow database never gets a live process restarted. Asked
# of the metrics listener (plain HTTP on 127.0.0.1 even when the callback speaks TLS).
# Kept in the image with `podman build --format docker` (OCI images have none).
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python3", "-c", "import os, urllib.request as u; u.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('LCCN_HTTP__METRICS_PORT', '9765'), timeout=4)"]
# SIGTERM (docker/podman stop) is a graceful stop: intake first, then the running steps
# up to dispatch.graceful_timeout; give the container at least that (stop -t).
STOPSIGNAL SIGTERM
CMD ["lccn-subscriber", "serve"]
