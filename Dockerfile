# rkv's container images (docs/DOCKER.md). Two targets:
#   node   (the default, last stage): the node, the CLI and the Redis replicator;
#   audit  the same plus a Java runtime and the `spark` extra, for `rkv audit`.
# Nodes do not carry Java and PySpark (several hundred MB) they never run.
#
# Build arguments:
#   BASE_IMAGE  any Debian-based image with Python 3.11 (python3 and its venv module)
#   WHEELHOUSE  a directory inside the build context holding every wheel needed:
#               pip then installs offline from it; empty: from the package index
ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS runtime
# The directories named volumes are mounted on: an empty named volume takes
# the ownership of the image's directory, so the non-root user can write it.
RUN useradd --system --uid 10001 --user-group --home-dir /var/lib/rkv \
        --shell /usr/sbin/nologin rkv \
    && mkdir -p /var/lib/rkv /exports /secret /reports \
    && chown rkv:rkv /var/lib/rkv /exports /secret /reports \
    && chmod 0700 /secret
ENV PATH=/opt/rkv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1

FROM runtime AS build
ARG WHEELHOUSE=
COPY . /src
# "$@" holds pip's offline options when a wheelhouse is given.
RUN set -eu; \
    if [ -n "$WHEELHOUSE" ]; then set -- --no-index --find-links "/src/$WHEELHOUSE"; fi; \
    python3 -m venv /opt/rkv; \
    /opt/rkv/bin/pip install --no-cache-dir --quiet "$@" /src

FROM build AS build-audit
ARG WHEELHOUSE=
RUN set -eu; \
    if [ -n "$WHEELHOUSE" ]; then set -- --no-index --find-links "/src/$WHEELHOUSE"; fi; \
    /opt/rkv/bin/pip install --no-cache-dir --quiet "$@" "/src[spark]"

FROM runtime AS audit
# Spark's local mode needs a Java runtime: the distribution's default one
# (17 on Debian 12), unless the base image already has Java.
RUN if ! command -v java >/dev/null 2>&1; then \
        mkdir -p /usr/share/man/man1 \
        && apt-get update -qq \
        && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            default-jre-headless >/dev/null \
        && rm -rf /var/lib/apt/lists/*; \
    fi
COPY --from=build-audit /opt/rkv /opt/rkv
USER rkv
WORKDIR /var/lib/rkv
ENTRYPOINT ["rkv"]
CMD ["audit", "--help"]

FROM runtime AS node
COPY --from=build /opt/rkv /opt/rkv
USER rkv
WORKDIR /var/lib/rkv
ENV RKV_LISTEN=0.0.0.0:8001 \
    RKV_DATA_DIR=/var/lib/rkv
EXPOSE 8001 8101
# Healthy = ready: the node knows a leader, has caught up and is not stalled.
# /readyz needs no credentials; with TLS on (RKV_TLS_CERT) it is asked over
# HTTPS, verified with RKV_TLS_CA (the node certificate names 127.0.0.1).
HEALTHCHECK --interval=5s --timeout=3s --start-period=60s --retries=3 \
    CMD ["python3", "-c", "import os, ssl, urllib.request; env = os.environ.get; port = env('RKV_LISTEN', ':8001').rsplit(':', 1)[1]; tls = bool(env('RKV_TLS_CERT')); context = ssl.create_default_context(cafile=env('RKV_TLS_CA')) if tls else None; urllib.request.urlopen(('https' if tls else 'http') + f'://127.0.0.1:{port}/readyz', timeout=2, context=context)"]
# Exec form: rkv is PID 1 (or docker-init's child with --init) and stops on
# SIGTERM itself (node/cli/wiring.py), well within `docker stop`'s 10 s.
STOPSIGNAL SIGTERM
ENTRYPOINT ["rkv"]
CMD ["node"]
