# A Redis image for the container tier, which reaches no container registry:
# Debian's redis-server on the tier's debootstrap base (tests/docker/images.py).
# docker-compose.yml runs it as RKV_REDIS_IMAGE with its own command.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
RUN apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        redis-server >/dev/null \
    && rm -rf /var/lib/apt/lists/*
USER redis
CMD ["redis-server", "--protected-mode", "no", "--save", "", "--appendonly", "no"]
